//! A message's fields read in place with prost's primitives: strings and sub-messages are
//! borrowed from the page, nothing is allocated. prost's derived decoder builds an owned
//! `String` for every name and value; their churn between the fleet model's long-lived
//! allocations made `caps`'s peak memory 2.2× the JSON (benches/caps.rs).
//!
//! Each reader knows its message's fields by number; the others are skipped as protobuf
//! requires. Nesting is the schema's, fixed in code: input controls only the depth of skipped
//! groups, which prost bounds (100 levels).

use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};

/// Why a message could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("{message} field {field} has wire type {found:?}, not {expected:?}")]
    WireType {
        message: &'static str,
        field: u32,
        found: WireType,
        expected: WireType,
    },
    #[error("{message} field {field} says {length} bytes, but only {left} are left")]
    Length {
        message: &'static str,
        field: u32,
        length: u64,
        left: usize,
    },
    #[error("{message} field {field} is not UTF-8")]
    Utf8 {
        message: &'static str,
        field: u32,
        #[source]
        cause: std::str::Utf8Error,
    },
    /// More items than the page's `limit` asked for.
    #[error("{message} has more than {max} items, the limit asked for")]
    TooMany { message: &'static str, max: usize },
    /// A truncated or malformed key or varint, or an unknown field that cannot be skipped.
    #[error("unreadable {message}")]
    Wire {
        message: &'static str,
        #[source]
        cause: prost::DecodeError,
    },
}

/// The fields of one message (`message` names it in errors), read front to back.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    message: &'static str,
}

/// One field, read by exactly one of its methods (or skipped) before the next.
pub(crate) struct Field<'r, 'a> {
    reader: &'r mut Reader<'a>,
    pub(crate) tag: u32,
    wire_type: WireType,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], message: &'static str) -> Reader<'a> {
        Reader { buf, message }
    }

    /// The next field, `None` at the message's end. Each field consumes at least its key's
    /// byte, so a loop over a reader is bounded by the message's length.
    pub(crate) fn next(&mut self) -> Result<Option<Field<'_, 'a>>, WireError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let (tag, wire_type) = decode_key(&mut self.buf).map_err(|cause| WireError::Wire {
            message: self.message,
            cause,
        })?;
        Ok(Some(Field {
            reader: self,
            tag,
            wire_type,
        }))
    }
}

impl<'a> Field<'_, 'a> {
    fn expect(&self, expected: WireType) -> Result<(), WireError> {
        if self.wire_type == expected {
            return Ok(());
        }
        Err(WireError::WireType {
            message: self.reader.message,
            field: self.tag,
            found: self.wire_type,
            expected,
        })
    }

    fn unreadable(&self) -> impl FnOnce(prost::DecodeError) -> WireError + use<> {
        let message = self.reader.message;
        move |cause| WireError::Wire { message, cause }
    }

    pub(crate) fn varint(self) -> Result<u64, WireError> {
        self.expect(WireType::Varint)?;
        decode_varint(&mut self.reader.buf).map_err(self.unreadable())
    }

    /// `int64`: the varint's bits, as prost and Go read it.
    pub(crate) fn int64(self) -> Result<i64, WireError> {
        self.varint().map(|v| v as i64)
    }

    pub(crate) fn bool(self) -> Result<bool, WireError> {
        self.varint().map(|v| v != 0)
    }

    /// A length-delimited field's bytes.
    pub(crate) fn bytes(self) -> Result<&'a [u8], WireError> {
        self.expect(WireType::LengthDelimited)?;
        let length = decode_varint(&mut self.reader.buf).map_err(self.unreadable())?;
        let left = self.reader.buf.len();
        let Some(bytes) = usize::try_from(length).ok().filter(|&l| l <= left) else {
            return Err(WireError::Length {
                message: self.reader.message,
                field: self.tag,
                length,
                left,
            });
        };
        let (bytes, rest) = self.reader.buf.split_at(bytes);
        self.reader.buf = rest;
        Ok(bytes)
    }

    pub(crate) fn str(self) -> Result<&'a str, WireError> {
        let (message, field) = (self.reader.message, self.tag);
        std::str::from_utf8(self.bytes()?).map_err(|cause| WireError::Utf8 {
            message,
            field,
            cause,
        })
    }

    /// A sub-message, `message` naming it in errors.
    pub(crate) fn message(self, message: &'static str) -> Result<Reader<'a>, WireError> {
        Ok(Reader::new(self.bytes()?, message))
    }

    /// A field this reader does not use.
    pub(crate) fn skip(self) -> Result<(), WireError> {
        let unreadable = self.unreadable();
        skip_field(
            self.wire_type,
            self.tag,
            &mut self.reader.buf,
            DecodeContext::default(),
        )
        .map_err(unreadable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of a message read by `read`, as the error line it ends with.
    fn first_error(bytes: &[u8], read: impl Fn(Field) -> Result<(), WireError>) -> String {
        let mut reader = Reader::new(bytes, "Test");
        let result: Result<(), WireError> = (|| {
            while let Some(field) = reader.next()? {
                read(field)?;
            }
            Ok(())
        })();
        let error = result.unwrap_err();
        crate::kubeconfig::chain(&error)
    }

    #[test]
    fn reads_in_place_and_skips_unknown_fields() {
        // 1: "ab", 7: varint 300 (unknown), 2: varint 1, 3: fixed64 (unknown), 4: "x".
        let bytes = [
            0x0a, 2, b'a', b'b', 0x38, 0xac, 0x02, 0x10, 1, 0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x22, 1,
            b'x',
        ];
        let mut reader = Reader::new(&bytes, "Test");
        let mut read = Vec::new();
        while let Some(field) = reader.next().unwrap() {
            match field.tag {
                1 | 4 => read.push(field.str().unwrap().to_owned()),
                2 => read.push(field.bool().unwrap().to_string()),
                _ => field.skip().unwrap(),
            }
        }
        assert_eq!(read, ["ab", "true", "x"]);
    }

    #[test]
    fn each_bad_field_is_one_error() {
        let str = |field: Field| field.str().map(drop);
        assert_eq!(
            first_error(&[0x0a, 3, b'a'], str),
            "Test field 1 says 3 bytes, but only 1 are left"
        );
        assert_eq!(
            first_error(
                &[
                    0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
                ],
                str
            ),
            "Test field 1 says 18446744073709551615 bytes, but only 0 are left"
        );
        assert_eq!(
            first_error(&[0x0a, 2, 0xc3, 0x28], str),
            "Test field 1 is not UTF-8: invalid utf-8 sequence of 1 bytes from index 0"
        );
        assert_eq!(
            first_error(&[0x08, 1], str),
            "Test field 1 has wire type Varint, not LengthDelimited"
        );
        let int = |field: Field| field.int64().map(drop);
        assert_eq!(
            first_error(&[0x08, 0x80, 0x80], int),
            "unreadable Test: failed to decode Protobuf message: invalid varint"
        );
        assert_eq!(
            first_error(&[0x80], int),
            "unreadable Test: failed to decode Protobuf message: invalid varint"
        );
        let skip = |field: Field| field.skip();
        assert_eq!(
            first_error(&[0x3a, 5, 1], skip),
            "unreadable Test: failed to decode Protobuf message: buffer underflow"
        );
        // An end of group never opened.
        assert!(first_error(&[0x3c], skip).starts_with("unreadable Test: "));
    }

    #[test]
    fn groups_nested_past_prosts_limit_are_an_error_not_a_stack_overflow() {
        const DEPTH: usize = 100_000;
        let nested = [vec![0x4b; DEPTH], vec![0x4c; DEPTH]].concat();
        let error = first_error(&nested, |field| field.skip());
        assert_eq!(
            error,
            "unreadable Test: failed to decode Protobuf message: recursion limit reached"
        );
    }
}
