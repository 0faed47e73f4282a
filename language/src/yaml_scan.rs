//! The nesting depth and the nodes of a YAML document, read event by
//! event and refused at the first level (or node) past the bound, before
//! the rest of the text is read.
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
//! much as reading 100. The nodes as written are counted too: serde_yaml
//! holds every event of a document before it walks them (the walk counts
//! nodes with aliases expanded), so a 4 MiB list of a million items took
//! 290 MB before it was refused; stopped here at the bound, it is never
//! held.
//!
//! The parser is serde_yaml's own, not a second one or a hand-written
//! scan of brackets: the depth measured is the depth serde_yaml would
//! build (a bracket in a plain or block scalar opens nothing), and a
//! document the parser refuses is left for serde_yaml to refuse with its
//! own message.

use std::mem::MaybeUninit;

/// The bound a text passed while its events were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Passed {
    /// A node sits below more than `max_depth` open sequences and mappings.
    Depth,
    /// It holds more than `max_nodes` nodes as written: aliases not
    /// expanded (expanded, it holds at least as many).
    Nodes,
}

/// Reads `text`'s events until its end, or until a node opens at a depth
/// past `max_depth` (the top level is 0, as in [`crate::bounded_yaml`])
/// or the nodes written pass `max_nodes`. A text libyaml cannot read is
/// not refused here: serde_yaml refuses it when it reads it, naming the
/// problem.
pub(crate) fn check_events(text: &str, max_depth: usize, max_nodes: usize) -> Result<(), Passed> {
    use unsafe_libyaml::{
        YAML_ALIAS_EVENT as ALIAS, YAML_MAPPING_END_EVENT as MAPPING_END,
        YAML_MAPPING_START_EVENT as MAPPING_START, YAML_NO_EVENT as NO_EVENT,
        YAML_SCALAR_EVENT as SCALAR, YAML_SEQUENCE_END_EVENT as SEQUENCE_END,
        YAML_SEQUENCE_START_EVENT as SEQUENCE_START, YAML_STREAM_END_EVENT as STREAM_END,
    };
    let mut parser = Parser::new(text);
    let (mut open, mut nodes) = (0usize, 0usize);
    while let Some(kind) = parser.next_event() {
        if matches!(kind, SEQUENCE_START | MAPPING_START | SCALAR | ALIAS) {
            if open > max_depth {
                return Err(Passed::Depth);
            }
            nodes += 1;
            if nodes > max_nodes {
                return Err(Passed::Nodes);
            }
        }
        match kind {
            SEQUENCE_START | MAPPING_START => open += 1,
            SEQUENCE_END | MAPPING_END => open = open.saturating_sub(1),
            // The end, or an empty event (libyaml's answer past the end).
            STREAM_END | NO_EVENT => return Ok(()),
            _ => {}
        }
    }
    Ok(())
}

/// A libyaml parser reading a borrowed text, freed when dropped.
struct Parser<'t> {
    /// Boxed: libyaml keeps a pointer to the parser in the parser (its
    /// string reader's data), so it must not move once set up.
    sys: Box<MaybeUninit<unsafe_libyaml::yaml_parser_t>>,
    /// The text the parser points into, which must outlive it.
    _text: std::marker::PhantomData<&'t str>,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Self {
        let mut sys = Box::new(MaybeUninit::<unsafe_libyaml::yaml_parser_t>::uninit());
        // SAFETY: `yaml_parser_initialize` fills the whole struct (it
        // zeroes it first); it fails only when out of memory, as the
        // allocator would. The input pointer stays valid for `'t`, which
        // the parser cannot outlive.
        unsafe {
            let parser = sys.as_mut_ptr();
            assert!(
                unsafe_libyaml::yaml_parser_initialize(parser).ok,
                "libyaml could not allocate a parser"
            );
            unsafe_libyaml::yaml_parser_set_encoding(parser, unsafe_libyaml::YAML_UTF8_ENCODING);
            unsafe_libyaml::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as u64);
        }
        Parser {
            sys,
            _text: std::marker::PhantomData,
        }
    }

    /// The next event's kind, or `None` when the parser meets an error
    /// (after which it is not asked again: libyaml then answers empty
    /// events).
    fn next_event(&mut self) -> Option<unsafe_libyaml::yaml_event_type_t> {
        let mut event = MaybeUninit::<unsafe_libyaml::yaml_event_t>::uninit();
        // SAFETY: the parser was initialized in `new`; a successful
        // `yaml_parser_parse` fills `event`, which is read once and
        // freed at once; after a failure `check_depth` stops asking.
        unsafe {
            let parser = self.sys.as_mut_ptr();
            if !unsafe_libyaml::yaml_parser_parse(parser, event.as_mut_ptr()).ok {
                return None;
            }
            let kind = (*event.as_ptr()).type_;
            unsafe_libyaml::yaml_event_delete(event.as_mut_ptr());
            Some(kind)
        }
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`, deleted once, here.
        unsafe { unsafe_libyaml::yaml_parser_delete(self.sys.as_mut_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_depth(text: &str, max_depth: usize) -> Result<(), Passed> {
        check_events(text, max_depth, usize::MAX)
    }

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn depth_counts_nodes_below_open_collections_as_the_builder_does() {
        // 101 sequences: the innermost sits at depth 100.
        assert_eq!(check_depth(&nested(101), 100), Ok(()));
        assert_eq!(check_depth(&nested(102), 100), Err(Passed::Depth));
        // A scalar inside 101 sequences sits at depth 101.
        let scalar = format!("{}x{}", "[".repeat(101), "]".repeat(101));
        assert_eq!(check_depth(&scalar, 100), Err(Passed::Depth));
        // Block nesting counts the same.
        assert_eq!(check_depth(&format!("{}x", "- ".repeat(100)), 100), Ok(()));
        assert_eq!(
            check_depth(&format!("{}x", "- ".repeat(101)), 100),
            Err(Passed::Depth)
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
        assert_eq!(check_depth(&two, 100), Err(Passed::Depth));
    }

    #[test]
    fn nodes_are_counted_as_written() {
        // A mapping, two keys, a list of three, an alias.
        let doc = "k: &x [1, 2, 3]\nv: *x\n";
        assert_eq!(check_events(doc, 100, 8), Ok(()));
        assert_eq!(check_events(doc, 100, 7), Err(Passed::Nodes));
        let wide = format!("[{}]", vec!["a"; 1000].join(","));
        assert_eq!(check_events(&wide, 100, 1001), Ok(()));
        assert_eq!(check_events(&wide, 100, 1000), Err(Passed::Nodes));
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
        assert_eq!(check_depth(&deep, 100), Err(Passed::Depth));
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(1), "{took:?}");
        let deep_maps = format!("{}1{}", "{a: ".repeat(100_000), "}".repeat(100_000));
        assert_eq!(check_depth(&deep_maps, 100), Err(Passed::Depth));
    }
}
