//! Where each key of a recipe stands in its file: a map from dotted key path
//! (`services[2].placement.node`) to line and column.
//!
//! serde reports positions only for errors it raises itself; rules that span several entries
//! (unique names, two services on one port) are checked after parsing, and they use this index
//! to point at the line anyway. It reads the text with a YAML event parser and never fails: a
//! document it cannot read (serde would have refused it first) simply has no positions.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};

/// Deeper nesting than this is not indexed (recipes are a few levels deep; a hostile document
/// must not cost memory here).
const MAX_DEPTH: usize = 32;
/// At most this many paths are indexed.
const MAX_ENTRIES: usize = 100_000;

/// Key path → 1-based (line, column) of the key (for a mapping entry) or of the item (for a list
/// entry).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyIndex {
    positions: HashMap<String, (usize, usize)>,
    /// Scalar values' own positions (a key's value, or a list item), by path.
    values: HashMap<String, (usize, usize)>,
}

enum Frame {
    Map {
        path: String,
        key: Option<String>,
        /// A list item that is a mapping: positioned at its first key (the parser's mark for
        /// the mapping itself points past it).
        item: Option<String>,
    },
    Seq {
        path: String,
        index: usize,
    },
}

fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

impl KeyIndex {
    /// Index the first document of `text`.
    pub fn build(text: &str) -> KeyIndex {
        let mut index = KeyIndex::default();
        let mut parser = Parser::new_from_str(text);
        let mut stack: Vec<Frame> = Vec::new();
        // Each node's path is decided by its parent frame; a key scalar only names the next node.
        while let Ok((event, mark)) = parser.next_token() {
            let pos = (mark.line(), mark.col() + 1);
            // The path of the node this event starts, if it starts one.
            let node_path = |stack: &mut Vec<Frame>| -> Option<String> {
                match stack.last_mut() {
                    None => Some(String::new()),
                    Some(Frame::Seq { path, index }) => {
                        let p = format!("{path}[{index}]");
                        *index += 1;
                        Some(p)
                    }
                    Some(Frame::Map { path, key, .. }) => key.take().map(|k| join(path, &k)),
                }
            };
            match event {
                Event::StreamEnd | Event::DocumentEnd => break,
                Event::Scalar(value, ..) => {
                    let is_key = matches!(stack.last(), Some(Frame::Map { key: None, .. }));
                    if is_key {
                        if let Some(Frame::Map { path, key, item }) = stack.last_mut() {
                            if let Some(item) = item.take() {
                                index.record(item, pos);
                            }
                            index.record(join(path, &value), pos);
                            *key = Some(value);
                        }
                    } else if let Some(p) = node_path(&mut stack) {
                        index.record_value(&p, pos);
                        index.record(p, pos);
                    }
                }
                Event::Alias(_) => {
                    node_path(&mut stack);
                }
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    let is_key = matches!(stack.last(), Some(Frame::Map { key: None, .. }));
                    // A complex (non-scalar) key: index nothing below it.
                    let p = if is_key { None } else { node_path(&mut stack) };
                    let is_map = matches!(event, Event::MappingStart(..));
                    let item = p.clone().filter(|p| p.ends_with(']'));
                    if let (Some(item), false) = (&item, is_map) {
                        index.record(item.clone(), pos);
                    }
                    let path = p.unwrap_or_else(|| "\u{0}".into());
                    if stack.len() >= MAX_DEPTH {
                        break;
                    }
                    stack.push(if is_map {
                        Frame::Map {
                            path,
                            key: None,
                            item: item.filter(|_| is_map),
                        }
                    } else {
                        Frame::Seq { path, index: 0 }
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                    // A container that was a key's value consumed that key already.
                }
                _ => {}
            }
        }
        index
    }

    fn record(&mut self, path: String, pos: (usize, usize)) {
        if self.positions.len() < MAX_ENTRIES && !path.contains('\u{0}') {
            self.positions.entry(path).or_insert(pos);
        }
    }

    fn record_value(&mut self, path: &str, pos: (usize, usize)) {
        if self.values.len() < MAX_ENTRIES && !path.contains('\u{0}') {
            self.values.entry(path.to_string()).or_insert(pos);
        }
    }

    /// The position of the scalar value at exactly `path`.
    pub fn find_value(&self, path: &str) -> Option<(usize, usize)> {
        self.values.get(path).copied()
    }

    /// The position of exactly `path`.
    pub fn find_exact(&self, path: &str) -> Option<(usize, usize)> {
        self.positions.get(path).copied()
    }

    /// The position of `path`, or of its nearest indexed ancestor.
    pub fn find(&self, path: &str) -> Option<(usize, usize)> {
        let mut p = path;
        loop {
            if let Some(pos) = self.positions.get(p) {
                return Some(*pos);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
            if p.is_empty() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_list_items_have_positions() {
        let text = "schema: 2\nservices:\n  - name: a\n    type: etcd\n  - name: b\n    placement:\n      node: decode\nroles:\n  decode: {env: {A: \"1\"}}\n";
        let idx = KeyIndex::build(text);
        assert_eq!(idx.find("schema"), Some((1, 1)));
        assert_eq!(idx.find("services[0]"), Some((3, 5)));
        assert_eq!(idx.find("services[1].name"), Some((5, 5)));
        assert_eq!(idx.find("services[1].placement.node"), Some((7, 7)));
        assert_eq!(idx.find("roles.decode.env.A"), Some((9, 18)));
        // Unknown leaves fall back to their nearest known ancestor.
        assert_eq!(idx.find("services[1].readiness.port"), Some((5, 5)));
        assert_eq!(idx.find("nope"), None);
    }

    #[test]
    fn garbage_and_deep_nesting_do_not_fail() {
        assert_eq!(KeyIndex::build("a: [").find("a"), Some((1, 1)));
        let deep = "[".repeat(10_000);
        assert_eq!(KeyIndex::build(&deep).find("x"), None);
    }
}
