//! Row vectors deserialized into their final place: a JSON array does not say its
//! length, so a `Vec` read from it grows by doubling, copying every row each time and
//! making the kernel zero twice the memory the rows need (for a 1M-row profile that was
//! a third of `report`'s time). While a profile is parsed, its size in bytes bounds how
//! many rows any array can hold; the vectors reserve that up front. The reservation is
//! address space: pages the rows never reach are never touched, so never backed.

use std::{cell::Cell, fmt, marker::PhantomData};

use serde::{
    de::{SeqAccess, Visitor},
    Deserialize, Deserializer,
};

/// No array reserves more than this many bytes of address space per byte of the
/// document (a small node's overcommit limit must never be in play).
const MAX_RESERVE_PER_BYTE: usize = 2;

thread_local! {
    /// Bytes of the profile being parsed on this thread (0: not parsing a file).
    static PARSING_BYTES: Cell<usize> = const { Cell::new(0) };
}

/// Runs `parse` with arrays presized for a document of `bytes` bytes.
pub(crate) fn with_document_size<T>(bytes: usize, parse: impl FnOnce() -> T) -> T {
    struct Reset(usize);
    impl Drop for Reset {
        fn drop(&mut self) {
            PARSING_BYTES.with(|size| size.set(self.0));
        }
    }
    let _reset = Reset(PARSING_BYTES.with(|size| size.replace(bytes)));
    parse()
}

/// `#[serde(deserialize_with = "presized::<_, _, N>")]` for a row vector whose rows
/// take at least N bytes of JSON each.
pub(crate) fn presized<'de, D, T, const MIN_ROW_BYTES: usize>(
    deserializer: D,
) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct RowsVisitor<T, const MIN_ROW_BYTES: usize>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>, const MIN_ROW_BYTES: usize> Visitor<'de>
        for RowsVisitor<T, MIN_ROW_BYTES>
    {
        type Value = Vec<T>;

        fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
            formatter.write_str("an array of rows")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let bytes = PARSING_BYTES.with(Cell::get);
            let bound = (bytes / MIN_ROW_BYTES.max(1))
                .min(bytes * MAX_RESERVE_PER_BYTE / std::mem::size_of::<T>().max(1));
            let mut rows = Vec::with_capacity(seq.size_hint().unwrap_or(0).max(bound));
            while let Some(row) = seq.next_element()? {
                rows.push(row);
            }
            Ok(rows)
        }
    }
    deserializer.deserialize_seq(RowsVisitor::<T, MIN_ROW_BYTES>(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Doc {
        #[serde(deserialize_with = "presized::<_, _, 2>")]
        rows: Vec<u32>,
    }

    #[test]
    fn rows_are_read_whole_with_or_without_a_size() {
        let text = r#"{"rows":[1,2,3]}"#;
        let doc: Doc = with_document_size(text.len(), || serde_json::from_str(text)).unwrap();
        assert_eq!(doc.rows, [1, 2, 3]);
        assert!(doc.rows.capacity() >= text.len() / 2);
        let doc: Doc = serde_json::from_str(text).unwrap();
        assert_eq!(doc.rows, [1, 2, 3]);
        assert_eq!(
            PARSING_BYTES.with(Cell::get),
            0,
            "the size is reset after parsing"
        );
    }
}
