//! The nesting depth of a YAML document, read event by event and refused
//! at the first level past the bound, before the rest of the text is read.
//!
//! libyaml (which serde_yaml parses with, as `unsafe-libyaml`) costs time
//! with the square of a document's flow nesting: each token it reads
//! walks its stack of open flow levels. serde_yaml reads every event of a
//! document before its deserializer sees the first, so a bound on depth
//! checked while building comes after that cost: 50,000 levels of `[`
//! (100 KB) took 9 s, 100,000 most of a minute. Here the same parser is
//! driven one event at a time and stopped once a node opens past the
//! bound, so its stack never grows beyond the bound (and the ~1 KB it
//! looks ahead for a simple key): refusing 100,000 levels costs about as
//! much as reading 100.
//!
//! The parser is serde_yaml's own, not a second one or a hand-written
//! scan of brackets: the depth measured is the depth serde_yaml would
//! build (a bracket in a plain or block scalar opens nothing), and a
//! document the parser refuses is left for serde_yaml to refuse with its
//! own message.

use std::mem::MaybeUninit;

use unsafe_libyaml as sys;

/// A document nests deeper than the bound: some node sits below more
/// than `max_depth` open sequences and mappings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooDeep;

/// Reads `text`'s events until its end, or until a node opens at a depth
/// past `max_depth` (the top level is 0, as in [`crate::bounded_yaml`]).
/// A text libyaml cannot read is not refused here: serde_yaml refuses it
/// when it reads it, naming the problem.
pub(crate) fn check_depth(text: &str, max_depth: usize) -> Result<(), TooDeep> {
    let mut parser = Parser::new(text);
    let mut open = 0usize;
    while let Some(kind) = parser.next_event() {
        match kind {
            sys::YAML_SEQUENCE_START_EVENT | sys::YAML_MAPPING_START_EVENT => {
                if open > max_depth {
                    return Err(TooDeep);
                }
                open += 1;
            }
            sys::YAML_SEQUENCE_END_EVENT | sys::YAML_MAPPING_END_EVENT => {
                open = open.saturating_sub(1)
            }
            sys::YAML_SCALAR_EVENT | sys::YAML_ALIAS_EVENT if open > max_depth => {
                return Err(TooDeep)
            }
            // The end, or an empty event (libyaml's answer past the end).
            sys::YAML_STREAM_END_EVENT | sys::YAML_NO_EVENT => return Ok(()),
            _ => {}
        }
    }
    Ok(())
}

/// A libyaml parser reading a borrowed text, freed when dropped.
struct Parser<'t> {
    /// Boxed: libyaml keeps a pointer to the parser in the parser (its
    /// string reader's data), so it must not move once set up.
    sys: Box<MaybeUninit<sys::yaml_parser_t>>,
    /// The text the parser points into, which must outlive it.
    _text: std::marker::PhantomData<&'t str>,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Self {
        let mut sys = Box::new(MaybeUninit::<sys::yaml_parser_t>::uninit());
        // SAFETY: `yaml_parser_initialize` fills the whole struct (it
        // zeroes it first); it fails only when out of memory, as the
        // allocator would. The input pointer stays valid for `'t`, which
        // the parser cannot outlive.
        unsafe {
            let parser = sys.as_mut_ptr();
            assert!(
                sys::yaml_parser_initialize(parser).ok,
                "libyaml could not allocate a parser"
            );
            sys::yaml_parser_set_encoding(parser, sys::YAML_UTF8_ENCODING);
            sys::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as u64);
        }
        Parser {
            sys,
            _text: std::marker::PhantomData,
        }
    }

    /// The next event's kind, or `None` when the parser meets an error
    /// (after which it is not asked again: libyaml then answers empty
    /// events).
    fn next_event(&mut self) -> Option<sys::yaml_event_type_t> {
        let mut event = MaybeUninit::<sys::yaml_event_t>::uninit();
        // SAFETY: the parser was initialized in `new`; a successful
        // `yaml_parser_parse` fills `event`, which is read once and
        // freed at once; after a failure `check_depth` stops asking.
        unsafe {
            let parser = self.sys.as_mut_ptr();
            if !sys::yaml_parser_parse(parser, event.as_mut_ptr()).ok {
                return None;
            }
            let kind = (*event.as_ptr()).type_;
            sys::yaml_event_delete(event.as_mut_ptr());
            Some(kind)
        }
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`, deleted once, here.
        unsafe { sys::yaml_parser_delete(self.sys.as_mut_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn depth_counts_nodes_below_open_collections_as_the_builder_does() {
        // 101 sequences: the innermost sits at depth 100.
        assert_eq!(check_depth(&nested(101), 100), Ok(()));
        assert_eq!(check_depth(&nested(102), 100), Err(TooDeep));
        // A scalar inside 101 sequences sits at depth 101.
        let scalar = format!("{}x{}", "[".repeat(101), "]".repeat(101));
        assert_eq!(check_depth(&scalar, 100), Err(TooDeep));
        // Block nesting counts the same.
        assert_eq!(check_depth(&format!("{}x", "- ".repeat(100)), 100), Ok(()));
        assert_eq!(
            check_depth(&format!("{}x", "- ".repeat(101)), 100),
            Err(TooDeep)
        );
        // Brackets in scalars open nothing.
        let quoted = format!(
            "a: \"{}\"\nb: x{}\nc: |\n  {}\n",
            "[".repeat(500),
            "{".repeat(500),
            "[".repeat(500)
        );
        assert_eq!(check_depth(&quoted, 100), Ok(()));
        // Every document of a stream is read.
        let two = format!("a: 1\n---\n{}", nested(200));
        assert_eq!(check_depth(&two, 100), Err(TooDeep));
    }

    #[test]
    fn a_text_libyaml_refuses_is_left_to_serde_yaml() {
        assert_eq!(check_depth("a: [", 100), Ok(()));
        assert_eq!(check_depth("\t- x: : y", 100), Ok(()));
    }

    /// 100,000 levels of flow nesting (200 KB): read whole, libyaml's
    /// cost is quadratic (tens of seconds); refused at level 101, it is
    /// what 100 levels cost.
    #[test]
    fn a_document_nested_100000_deep_is_refused_in_milliseconds() {
        let deep = format!("x: {}", nested(100_000));
        let started = std::time::Instant::now();
        assert_eq!(check_depth(&deep, 100), Err(TooDeep));
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
        let deep_maps = format!("{}1{}", "{a: ".repeat(100_000), "}".repeat(100_000));
        assert_eq!(check_depth(&deep_maps, 100), Err(TooDeep));
    }
}
