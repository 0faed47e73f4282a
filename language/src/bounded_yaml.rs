//! YAML read within bounds: every document the engine or the CLI parses
//! from a caller or from storage (pipeline configs, task configs, vars
//! files, `load_var` files) goes through [`parse_bounded_yaml`], which
//! measures what the document *expands to* before it is built.
//!
//! YAML aliases make a small text stand for a large tree: one anchor of
//! 8,000 items referenced 8,000 times is 40 KB of text and 64 million
//! nodes once built (the "quadratic" bomb), and nested anchors each
//! referencing the one before grow exponentially ("billion laughs").
//! serde_yaml's own guard (a repetition limit counting alias jumps, not
//! the nodes they replay) lets the first through. So before building, a
//! pre-scan walks the document's events as serde_yaml's own deserializer
//! replays them (an alias replays its anchor's events), counting nodes,
//! the bytes of their scalars and the nesting depth, and stops at the
//! first bound passed. The pre-scan uses serde_yaml's parser itself, not a
//! second YAML parser: what it measures is exactly what would be built
//! (a second parser could disagree on an edge of the grammar, refusing a
//! document serde_yaml reads or measuring another tree than the one
//! built), and its cost is bounded by the limits, whatever the document
//! says: the events are read once (linear in the text), and the walk stops
//! once a bound is passed.
//!
//! Nesting, and the nodes as written, are bounded before that, as the
//! text is read: libyaml's cost grows with the square of a document's
//! flow nesting, and serde_yaml holds every event before its deserializer
//! sees one, so `yaml_scan.rs` drives the same parser event by
//! event and stops at the first level or node past the bound. The size bound comes first of all,
//! on the text given (its readers bound what they read: the API's body
//! limit, the CLI's `read_document`).
//!
//! The bounds ([`YamlBounds::DEFAULT`]) are generous for real pipelines (a
//! pipeline of 10,000 jobs is a few hundred thousand nodes); what passes
//! them costs at most a few hundred MiB to build.

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, Visitor};
use std::cell::Cell;
use std::fmt;

/// What a YAML document may be and expand to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct YamlBounds {
    /// The largest text, in bytes.
    pub max_bytes: usize,
    /// The most nodes (scalars, sequences, mappings), aliases expanded.
    pub max_nodes: usize,
    /// The most bytes of scalars (keys and values), aliases expanded.
    pub max_scalar_bytes: usize,
    /// The deepest nesting of sequences and mappings.
    pub max_depth: usize,
}

impl YamlBounds {
    /// The bounds of every document Gantry reads: 4 MiB of text, one
    /// million nodes and 16 MiB of scalars after aliases, 100 levels deep
    /// (below serde_yaml's own recursion limit of 128, so the error names
    /// this bound).
    pub const DEFAULT: YamlBounds = YamlBounds {
        max_bytes: 4 * 1024 * 1024,
        max_nodes: 1_000_000,
        max_scalar_bytes: 16 * 1024 * 1024,
        max_depth: 100,
    };
}

/// The largest YAML document Gantry reads, in bytes
/// ([`YamlBounds::DEFAULT`]'s `max_bytes`): the CLI reads a file up to it
/// and no further.
pub const MAX_DOCUMENT_BYTES: usize = YamlBounds::DEFAULT.max_bytes;

/// Why a document was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    /// The text is longer than [`YamlBounds::max_bytes`].
    #[error("{what} is {bytes} bytes, more than the limit of {limit} bytes")]
    TooLarge {
        /// The document (`pipeline config`).
        what: String,
        /// Its length.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// It expands to more than [`YamlBounds::max_nodes`] nodes.
    #[error("{what} expands to more than {limit} nodes after aliases (limit {limit})")]
    TooManyNodes {
        /// The document.
        what: String,
        /// The bound.
        limit: usize,
    },
    /// Its scalars expand to more than [`YamlBounds::max_scalar_bytes`].
    #[error("{what} expands to more than {limit} bytes of scalars after aliases (limit {limit})")]
    TooMuchText {
        /// The document.
        what: String,
        /// The bound.
        limit: usize,
    },
    /// It nests deeper than [`YamlBounds::max_depth`].
    #[error("{what} nests deeper than {limit} levels (limit {limit})")]
    TooDeep {
        /// The document.
        what: String,
        /// The bound.
        limit: usize,
    },
    /// Its aliases are replayed more than serde_yaml's repetition limit
    /// allows (100 alias uses per event of the text), a bound it meets
    /// before the node bound when aliases nest (billion laughs).
    #[error("{what} expands its aliases more than 100 times its own size (serde_yaml's repetition limit)")]
    TooManyAliasUses {
        /// The document.
        what: String,
    },
    /// It is not valid YAML (or not of the expected shape).
    #[error("not valid YAML: {0}")]
    Invalid(String),
}

/// Parses `text` (document `what`, named in errors: `pipeline config`)
/// into `T` once it is known to stay within [`YamlBounds::DEFAULT`].
pub fn parse_bounded_yaml<T: DeserializeOwned>(text: &str, what: &str) -> Result<T, YamlError> {
    parse_yaml_within(text, what, &YamlBounds::DEFAULT)
}

/// [`parse_bounded_yaml`] for the edges (a CLI flag's YAML value), the
/// problem as one line.
pub fn parse_yaml_value<T: DeserializeOwned>(text: &str, what: &str) -> Result<T, String> {
    parse_bounded_yaml(text, what).map_err(|e| e.to_string())
}

/// [`parse_bounded_yaml`] within `bounds`.
pub fn parse_yaml_within<T: DeserializeOwned>(
    text: &str,
    what: &str,
    bounds: &YamlBounds,
) -> Result<T, YamlError> {
    measure(text, what, bounds)?;
    serde_yaml::from_str(text).map_err(|e| invalid(&e))
}

/// Checks that `text` stays within `bounds`, without building it; answers
/// how many nodes it expands to.
pub fn measure(text: &str, what: &str, bounds: &YamlBounds) -> Result<usize, YamlError> {
    if text.len() > bounds.max_bytes {
        return Err(YamlError::TooLarge {
            what: what.to_string(),
            bytes: text.len(),
            limit: bounds.max_bytes,
        });
    }
    // Depth and nodes as written first, event by event: the parser's
    // cost grows with the square of the nesting, and serde_yaml holds
    // every event before its walk, so both are bounded before anything
    // reads the whole text (see `crate::yaml_scan`).
    match crate::yaml_scan::check_events(text, bounds.max_depth, bounds.max_nodes) {
        Ok(()) => {}
        Err(crate::yaml_scan::Passed::Depth) => {
            return Err(YamlError::TooDeep {
                what: what.to_string(),
                limit: bounds.max_depth,
            })
        }
        Err(crate::yaml_scan::Passed::Nodes) => {
            return Err(YamlError::TooManyNodes {
                what: what.to_string(),
                limit: bounds.max_nodes,
            })
        }
    }
    let tally = Tally {
        bounds,
        nodes: Cell::new(0),
        scalar_bytes: Cell::new(0),
        passed: Cell::new(None),
    };
    let walked = Node {
        tally: &tally,
        depth: 0,
    }
    .deserialize(serde_yaml::Deserializer::from_str(text));
    if let Some(bound) = tally.passed.get() {
        let what = what.to_string();
        return Err(match bound {
            Bound::Nodes => YamlError::TooManyNodes {
                what,
                limit: bounds.max_nodes,
            },
            Bound::ScalarBytes => YamlError::TooMuchText {
                what,
                limit: bounds.max_scalar_bytes,
            },
            Bound::Depth => YamlError::TooDeep {
                what,
                limit: bounds.max_depth,
            },
        });
    }
    match walked {
        Ok(()) => Ok(tally.nodes.get()),
        // serde_yaml's own bound on alias replays, met first when
        // anchors nest.
        Err(e) if e.to_string().starts_with("repetition limit exceeded") => {
            Err(YamlError::TooManyAliasUses {
                what: what.to_string(),
            })
        }
        Err(e) => Err(invalid(&e)),
    }
}

/// serde_yaml's error on one line.
fn invalid(e: &serde_yaml::Error) -> YamlError {
    YamlError::Invalid(e.to_string().replace('\n', " "))
}

/// Which bound the walk passed.
#[derive(Debug, Clone, Copy)]
enum Bound {
    Nodes,
    ScalarBytes,
    Depth,
}

/// What the walk has seen so far.
struct Tally<'b> {
    bounds: &'b YamlBounds,
    /// Nodes visited, aliases replayed.
    nodes: Cell<usize>,
    /// Bytes of the scalars visited.
    scalar_bytes: Cell<usize>,
    /// The bound passed, which ends the walk.
    passed: Cell<Option<Bound>>,
}

impl Tally<'_> {
    /// Counts a node of `bytes` scalar bytes at `depth`; an error (which
    /// the deserializer carries out) once a bound is passed.
    fn count<E: de::Error>(&self, depth: usize, bytes: usize) -> Result<(), E> {
        let nodes = self.nodes.get() + 1;
        let scalar_bytes = self.scalar_bytes.get().saturating_add(bytes);
        self.nodes.set(nodes);
        self.scalar_bytes.set(scalar_bytes);
        let passed = if depth > self.bounds.max_depth {
            Some(Bound::Depth)
        } else if nodes > self.bounds.max_nodes {
            Some(Bound::Nodes)
        } else if scalar_bytes > self.bounds.max_scalar_bytes {
            Some(Bound::ScalarBytes)
        } else {
            None
        };
        match passed {
            Some(bound) => {
                self.passed.set(Some(bound));
                Err(E::custom("a bound of the document was passed"))
            }
            None => Ok(()),
        }
    }
}

/// One node of the document at `depth` (the top level is 0): a seed that
/// counts it and everything under it, building nothing.
#[derive(Clone, Copy)]
struct Node<'t, 'b> {
    tally: &'t Tally<'b>,
    depth: usize,
}

impl Node<'_, '_> {
    fn child(&self) -> Self {
        Node {
            tally: self.tally,
            depth: self.depth + 1,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.tally.count(self.depth, 1)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.tally.count(self.depth, 8)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.tally.count(self.depth, 8)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.tally.count(self.depth, 8)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.tally.count(self.depth, v.len())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.tally.count(self.depth, 0)
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.tally.count(self.depth, 0)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.tally.count(self.depth, 0)?;
        while seq.next_element_seed(self.child())?.is_some() {}
        Ok(())
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.tally.count(self.depth, 0)?;
        while map.next_key_seed(self.child())?.is_some() {
            map.next_value_seed(self.child())?;
        }
        Ok(())
    }

    /// A tagged node (`!tag value`): the tag, then its value.
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        let (_, contents) = data.variant::<de::IgnoredAny>()?;
        de::VariantAccess::newtype_variant_seed(contents, self.child())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(text: &str) -> usize {
        measure(text, "doc", &YamlBounds::DEFAULT).unwrap()
    }

    /// One anchor of `items` items referenced `refs` times: 40 KB of text
    /// at 8,000 by 8,000, and 64 million nodes once built.
    fn quadratic_bomb(items: usize, refs: usize) -> String {
        let list = vec!["x"; items].join(",");
        let aliases = vec!["*a"; refs].join(",");
        format!("a: &a [{list}]\nb: [{aliases}]\n")
    }

    /// Nine levels of ten references each: 10^9 leaves once built.
    fn billion_laughs() -> String {
        let mut s = String::from("l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..=9 {
            let refs = vec![format!("*l{}", i - 1); 10].join(", ");
            s += &format!("l{i}: &l{i} [{refs}]\n");
        }
        s
    }

    #[test]
    fn nodes_are_counted_with_each_alias_expanded() {
        assert_eq!(nodes("a"), 1);
        assert_eq!(nodes("[a, b]"), 3);
        // The mapping, two keys, a list of three, and an alias replaying
        // the list (and its three items).
        assert_eq!(nodes("k: &x [1, 2, 3]\nv: *x\n"), 1 + 2 + 4 + 4);
        // A scalar alias counts one node.
        assert_eq!(nodes("- &s hello\n- *s\n- *s\n"), 4);
        // Tagged values count their value.
        assert_eq!(nodes("k: !custom [1, 2]\n"), 1 + 1 + 3);
        // Merge keys replay the merged mapping where they appear.
        assert_eq!(
            nodes("base: &b {x: 1}\nj: {<<: *b, y: 2}\n"),
            1 + 1 + 3 + 1 + 7
        );
        assert_eq!(nodes(""), 1);
    }

    #[test]
    fn a_quadratic_bomb_is_refused_naming_the_node_bound() {
        let bomb = quadratic_bomb(8_000, 8_000);
        assert!(bomb.len() < 50_000, "{}", bomb.len());
        let started = std::time::Instant::now();
        let e = parse_bounded_yaml::<serde_yaml::Value>(&bomb, "pipeline config").unwrap_err();
        assert_eq!(
            e.to_string(),
            "pipeline config expands to more than 1000000 nodes after aliases (limit 1000000)"
        );
        // The walk stops at the bound: a million nodes, not 64 million.
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        // Just under the bound, the same shape is read.
        let small = quadratic_bomb(100, 100);
        let v: serde_yaml::Value = parse_bounded_yaml(&small, "pipeline config").unwrap();
        assert_eq!(v["b"].as_sequence().unwrap().len(), 100);
    }

    #[test]
    fn a_billion_laughs_is_refused() {
        let e =
            parse_bounded_yaml::<serde_yaml::Value>(&billion_laughs(), "task config").unwrap_err();
        assert_eq!(
            e.to_string(),
            "task config expands its aliases more than 100 times its own size (serde_yaml's repetition limit)"
        );
        // Wider: the node bound comes first.
        let mut wide = String::from("l0: &l0 [");
        wide += &vec!["lol"; 1000].join(",");
        wide += "]
";
        for i in 1..=4 {
            let refs = vec![format!("*l{}", i - 1); 1000].join(",");
            wide += &format!("l{i}: &l{i} [{refs}]\n");
        }
        let e = parse_bounded_yaml::<serde_yaml::Value>(&wide, "task config").unwrap_err();
        assert!(matches!(e, YamlError::TooManyNodes { .. }), "{e}");
    }

    #[test]
    fn long_scalars_replayed_by_aliases_are_refused_naming_the_text_bound() {
        let big = "y".repeat(1 << 20);
        let refs = vec!["*s"; 20].join(", ");
        let doc = format!("a: &s {big}\nb: [{refs}]\n");
        let e = parse_bounded_yaml::<serde_yaml::Value>(&doc, "vars file").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "vars file expands to more than {0} bytes of scalars after aliases (limit {0})",
                16 * 1024 * 1024
            )
        );
    }

    #[test]
    fn deep_documents_are_refused_naming_the_depth_bound() {
        for doc in [
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
            format!("{}1{}", "{a: ".repeat(10_000), "}".repeat(10_000)),
        ] {
            let e = parse_bounded_yaml::<serde_yaml::Value>(&doc, "pipeline config").unwrap_err();
            assert_eq!(
                e.to_string(),
                "pipeline config nests deeper than 100 levels (limit 100)"
            );
        }
        // 100,000 levels (200 KB): refused while read, at level 101,
        // not after libyaml's quadratic pass over the whole text.
        let deep = format!("x: {}{}", "[".repeat(100_000), "]".repeat(100_000));
        let started = std::time::Instant::now();
        let e = parse_bounded_yaml::<serde_yaml::Value>(&deep, "pipeline config").unwrap_err();
        assert!(matches!(e, YamlError::TooDeep { limit: 100, .. }), "{e}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
        parse_bounded_yaml::<serde_yaml::Value>(&ok, "pipeline config").unwrap();
    }

    /// A list of 1.5 million items (3 MB): refused once the millionth
    /// node is read, before serde_yaml holds its events.
    #[test]
    fn a_long_list_is_refused_as_it_is_read_naming_the_node_bound() {
        let list = format!("[{}]", vec!["a"; 1_500_000].join(","));
        let e = parse_bounded_yaml::<serde_yaml::Value>(&list, "vars file").unwrap_err();
        assert_eq!(
            e.to_string(),
            "vars file expands to more than 1000000 nodes after aliases (limit 1000000)"
        );
    }

    #[test]
    fn long_texts_and_bad_yaml_are_refused() {
        let bounds = YamlBounds {
            max_bytes: 10,
            ..YamlBounds::DEFAULT
        };
        let e = parse_yaml_within::<serde_yaml::Value>("a: 12345678901", "task config", &bounds)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "task config is 14 bytes, more than the limit of 10 bytes"
        );
        let e = parse_bounded_yaml::<serde_yaml::Value>("a: [", "task config").unwrap_err();
        assert!(matches!(e, YamlError::Invalid(_)), "{e}");
        assert!(e.to_string().starts_with("not valid YAML: "), "{e}");
    }
}
