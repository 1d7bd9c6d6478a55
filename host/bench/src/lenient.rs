//! JSON read into types leniently: OpenClaw's answers, a model's reply,
//! the bench's data and the run's own records. A field that is missing or
//! of another shape reads as its default (none, empty), as the key lookups
//! these types replaced did, and costs nothing else of the value.

use metaclaw_wire::Obj;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::Value;

/// `value` read as the struct `T` when it is an object; anything else, or
/// an object `T` cannot read, is `T`'s default (a derived struct would
/// also read a list, which a lookup by key never did).
pub fn object<T: DeserializeOwned + Default>(value: &Value) -> T {
    Obj::<T>::read(value).unwrap_or_default()
}

/// A field read as `T`, or `T`'s default where it has another shape (the
/// wire crate's reader for recorded messages).
pub use metaclaw_wire::recorded::lenient as field;

/// A struct field read by [`object`].
pub fn obj<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(d: D) -> Result<T, D::Error> {
    Ok(object(&Value::deserialize(d)?))
}

/// A list, each element read by [`object`]; not a list: empty.
pub fn each<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => items.iter().map(object).collect(),
        _ => Vec::new(),
    })
}

/// A list's strings, its other elements dropped; not a list: none.
pub fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(items) => Some(
            items
                .into_iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s),
                    _ => None,
                })
                .collect(),
        ),
        _ => None,
    })
}
