//! What goes into a statement ([`Arg`], from anything [`ToArg`]) and what
//! comes out of a row ([`Cell`], read as anything [`FromCell`]): SQLite's
//! five storage classes, which is all the store writes on either backend.

use std::borrow::Cow;
use std::sync::Arc;

use super::{Error, Result};

/// An argument, borrowed from the caller where it can be.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(Cow<'a, str>),
    Blob(Cow<'a, [u8]>),
}

/// A column's value, as read.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Cell {
    fn kind(&self) -> &'static str {
        match self {
            Self::Null => "NULL",
            Self::Int(_) => "an integer",
            Self::Real(_) => "a real",
            Self::Text(_) => "text",
            Self::Blob(_) => "a blob",
        }
    }

    fn mismatch(&self, wanted: &str) -> Mismatch {
        Mismatch(format!("{} where {wanted} was expected", self.kind()))
    }
}

impl From<rusqlite::types::ValueRef<'_>> for Cell {
    fn from(v: rusqlite::types::ValueRef<'_>) -> Self {
        use rusqlite::types::ValueRef;
        match v {
            ValueRef::Null => Self::Null,
            ValueRef::Integer(i) => Self::Int(i),
            ValueRef::Real(r) => Self::Real(r),
            ValueRef::Text(t) => Self::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Self::Blob(b.to_vec()),
        }
    }
}

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Self::Null => ValueRef::Null,
            Self::Int(i) => ValueRef::Integer(*i),
            Self::Real(r) => ValueRef::Real(*r),
            Self::Text(t) => ValueRef::Text(t.as_bytes()),
            Self::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// A value a statement takes as an argument.
pub trait ToArg {
    fn to_arg(&self) -> Result<Arg<'_>>;
}

/// Why a cell is not what it was read as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch(pub String);

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A value read from a column.
pub trait FromCell: Sized {
    /// `Err` says what the cell held instead.
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch>;
}

/// A statement's arguments: `params![…]`, `()`, an array of one type, a
/// tuple, or [`params_from_iter`].
pub trait Params {
    fn args(&self) -> Result<Vec<Arg<'_>>>;
}

impl Params for () {
    fn args(&self) -> Result<Vec<Arg<'_>>> {
        Ok(Vec::new())
    }
}

impl<T: ToArg, const N: usize> Params for [T; N] {
    fn args(&self) -> Result<Vec<Arg<'_>>> {
        self.iter().map(ToArg::to_arg).collect()
    }
}

impl<T: ToArg> Params for &[T] {
    fn args(&self) -> Result<Vec<Arg<'_>>> {
        self.iter().map(ToArg::to_arg).collect()
    }
}

/// Arguments from an iterator of one type.
pub struct FromIter<T>(Vec<T>);

pub fn params_from_iter<T: ToArg>(iter: impl IntoIterator<Item = T>) -> FromIter<T> {
    FromIter(iter.into_iter().collect())
}

impl<T: ToArg> Params for FromIter<T> {
    fn args(&self) -> Result<Vec<Arg<'_>>> {
        self.0.iter().map(ToArg::to_arg).collect()
    }
}

macro_rules! tuple_params {
    ($($t:ident $i:tt),+) => {
        impl<$($t: ToArg),+> Params for ($($t,)+) {
            fn args(&self) -> Result<Vec<Arg<'_>>> {
                Ok(vec![$(self.$i.to_arg()?),+])
            }
        }
    };
}
tuple_params!(A 0);
tuple_params!(A 0, B 1);
tuple_params!(A 0, B 1, C 2);
tuple_params!(A 0, B 1, C 2, D 3);
tuple_params!(A 0, B 1, C 2, D 3, E 4);
tuple_params!(A 0, B 1, C 2, D 3, E 4, F 5);

impl<T: ToArg + ?Sized> ToArg for &T {
    fn to_arg(&self) -> Result<Arg<'_>> {
        (**self).to_arg()
    }
}

impl<T: ToArg> ToArg for Option<T> {
    fn to_arg(&self) -> Result<Arg<'_>> {
        match self {
            Some(v) => v.to_arg(),
            None => Ok(Arg::Null),
        }
    }
}

impl ToArg for Arg<'_> {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(self.clone())
    }
}

macro_rules! int_arg {
    ($($t:ty),+) => {$(
        impl ToArg for $t {
            fn to_arg(&self) -> Result<Arg<'_>> {
                i64::try_from(*self)
                    .map(Arg::Int)
                    .map_err(|_| Error::Arg(format!("{} does not fit a 64-bit integer", self)))
            }
        }
    )+};
}
int_arg!(i64, i32, i16, i8, u32, u16, u8, u64, usize);

impl ToArg for bool {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Int(i64::from(*self)))
    }
}

impl ToArg for f64 {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Real(*self))
    }
}

impl ToArg for f32 {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Real(f64::from(*self)))
    }
}

impl ToArg for str {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Text(Cow::Borrowed(self)))
    }
}

impl ToArg for String {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Text(Cow::Borrowed(self)))
    }
}

impl ToArg for Arc<str> {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Text(Cow::Borrowed(self)))
    }
}

impl ToArg for Box<str> {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Text(Cow::Borrowed(self)))
    }
}

impl ToArg for Cow<'_, str> {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Text(Cow::Borrowed(self)))
    }
}

impl ToArg for [u8] {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Blob(Cow::Borrowed(self)))
    }
}

impl<const N: usize> ToArg for [u8; N] {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Blob(Cow::Borrowed(self)))
    }
}

impl ToArg for Vec<u8> {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Blob(Cow::Borrowed(self)))
    }
}

impl ToArg for bytes::Bytes {
    fn to_arg(&self) -> Result<Arg<'_>> {
        Ok(Arg::Blob(Cow::Borrowed(self)))
    }
}

impl<T: FromCell> FromCell for Option<T> {
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
        match cell {
            Cell::Null => Ok(None),
            other => T::from_cell(other).map(Some),
        }
    }
}

impl FromCell for Cell {
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
        Ok(cell.clone())
    }
}

impl FromCell for i64 {
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
        match cell {
            Cell::Int(i) => Ok(*i),
            other => Err(other.mismatch("an integer")),
        }
    }
}

macro_rules! narrow_int_cell {
    ($($t:ty),+) => {$(
        impl FromCell for $t {
            fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
                let wide = i64::from_cell(cell)?;
                <$t>::try_from(wide).map_err(|_| {
                    Mismatch(format!("{wide} is out of range for {}", stringify!($t)))
                })
            }
        }
    )+};
}
narrow_int_cell!(i32, i16, i8, u32, u16, u8, u64, usize);

impl FromCell for bool {
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
        Ok(i64::from_cell(cell)? != 0)
    }
}

impl FromCell for f64 {
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
        match cell {
            Cell::Real(r) => Ok(*r),
            // SQLite keeps a whole REAL as an integer; Postgres's sums of
            // integers come as integers too.
            #[allow(clippy::cast_precision_loss)]
            Cell::Int(i) => Ok(*i as f64),
            other => Err(other.mismatch("a number")),
        }
    }
}

impl FromCell for f32 {
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
        #[allow(clippy::cast_possible_truncation)]
        f64::from_cell(cell).map(|f| f as f32)
    }
}

impl FromCell for String {
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
        match cell {
            Cell::Text(t) => Ok(t.clone()),
            other => Err(other.mismatch("text")),
        }
    }
}

impl FromCell for Arc<str> {
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
        String::from_cell(cell).map(Arc::from)
    }
}

impl FromCell for Vec<u8> {
    fn from_cell(cell: &Cell) -> Result<Self, Mismatch> {
        match cell {
            Cell::Blob(b) => Ok(b.clone()),
            other => Err(other.mismatch("a blob")),
        }
    }
}
