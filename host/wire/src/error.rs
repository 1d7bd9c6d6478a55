//! What the translators and parsers refuse. Each variant reads as the
//! message the client gets; the proxy maps it to its HTTP error (status,
//! JSON body in the client's API shape, metrics label).

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The body is not JSON at all (serde's description of where).
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    /// JSON, but not an object.
    #[error("the request body must be a JSON object")]
    NotAnObject,
    /// A required field is absent: `field` is required: `expected`.
    #[error("`{field}` is required: {expected}")]
    Missing {
        field: &'static str,
        expected: &'static str,
    },
    /// A field of the wrong type or value. `field` is spelled as the client
    /// knows it: `` `messages` `` or `messages[2].role`.
    #[error("{field} must be {expected}")]
    BadField {
        field: String,
        expected: &'static str,
    },
    /// An item that names none of the kinds it may be.
    #[error("{field} needs {expected}")]
    Untyped {
        field: String,
        expected: &'static str,
    },
    /// A field metaclaw does not implement, and what to do instead.
    #[error("`{field}` is not supported: {instead}")]
    Unsupported {
        field: &'static str,
        instead: &'static str,
    },
    /// Well-formed JSON of the wrong shape, in serde's words (and a hint).
    #[error("invalid request: {0}")]
    Shape(String),
}

impl Error {
    /// A field of the wrong type or value.
    pub(crate) fn bad_field(field: impl Into<String>, expected: &'static str) -> Self {
        Self::BadField {
            field: field.into(),
            expected,
        }
    }

    /// The body could not be read as JSON (as opposed to JSON that is not
    /// a usable request): the two are counted apart.
    pub fn is_invalid_json(&self) -> bool {
        matches!(self, Self::InvalidJson(_))
    }
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
