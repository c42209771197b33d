//! Reading a recipe file and turning serde's errors into [`RecipeError`]s a person can act on.
//!
//! Every input is bounded before serde sees it: the file is a regular file or a pipe of at most
//! [`MAX_RECIPE_BYTES`], and its YAML nests at most [`MAX_YAML_DEPTH`] levels. It must not
//! interpret the recipe: that is the typed [`Recipe`]'s job.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

use super::error::RecipeError;
use super::types::Recipe;
use super::values::{duplicate_flag_keys, split_at_key, FIX_MARKER};

/// Largest recipe accepted; real ones are a few KiB.
pub const MAX_RECIPE_BYTES: u64 = 4 << 20;

/// Deepest YAML nesting accepted, lists and mappings (block or flow) counted together; real
/// recipes nest under 10. libyaml's scanner costs O(tokens x flow depth) even in sections mcsup
/// skips, so 80 000 nested `[` (160 KB) took minutes; serde_yaml's own recursion limit (128)
/// applies only to what is deserialized, and a `raw` view of a document deeper than that would
/// silently be empty.
pub const MAX_YAML_DEPTH: usize = 64;

/// Why a recipe or plan file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputFileError {
    #[error("cannot be read: {0}")]
    Io(#[from] std::io::Error),
    #[error("is a directory")]
    Directory,
    /// A device, socket or other special file: reading `/dev/zero` would never end.
    #[error("is {kind}, not a regular file")]
    NotRegular { kind: &'static str },
    #[error("is larger than {}", mib(*limit))]
    TooLarge { limit: u64 },
}

fn mib(bytes: u64) -> String {
    if bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// A file read by [`read_input_file`], with the status of the descriptor it was read from.
#[derive(Debug)]
pub struct InputFile {
    pub bytes: Vec<u8>,
    /// `fstat` of the opened file (not of the path, which may have changed since).
    pub meta: std::fs::Metadata,
}

/// What a file that is neither regular nor a pipe (nor a directory) is.
fn special_kind(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_file() || t.is_fifo() || t.is_dir() {
        None
    } else {
        Some("a special file")
    }
}

/// Read a file the user named (a recipe, a plan): a regular file, or a FIFO/pipe (`--recipe
/// <(...)`), of at most `limit` bytes. Devices, sockets and directories are refused before they
/// are opened (opening a device can have side effects) and again on the opened descriptor; a pipe
/// is read through a bounded reader, so a writer that never stops costs `limit` bytes, no more.
pub fn read_input_file(path: &Path, limit: u64) -> Result<InputFile, InputFileError> {
    let check = |t: std::fs::FileType| match special_kind(t) {
        _ if t.is_dir() => Err(InputFileError::Directory),
        Some(kind) => Err(InputFileError::NotRegular { kind }),
        None => Ok(()),
    };
    check(std::fs::metadata(path)?.file_type())?;
    // Blocking open: a FIFO waits here for its writer, as `cat` would. O_NOCTTY: whatever the
    // path has become since the check, it never becomes our controlling terminal.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)?;
    let meta = file.metadata()?;
    check(meta.file_type())?;
    if meta.is_file() && meta.len() > limit {
        return Err(InputFileError::TooLarge { limit });
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(InputFileError::TooLarge { limit });
    }
    Ok(InputFile { bytes, meta })
}

/// Why another user could change a recipe this user runs, if one could (round 4's D15: a 0666
/// recipe, or one another user owns, ran as root without a word): owned by someone else than
/// this user or root, or writable by others or a group not the user's own. Pipes and the like
/// (no permission bits that matter) are not judged.
fn others_could_write(meta: &std::fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if !meta.is_file() {
        return None;
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me && meta.uid() != 0 {
        return Some(format!("is owned by uid {} (you are uid {me})", meta.uid()));
    }
    crate::domain::writable_by_others(meta)
        .then(|| format!("can be written by others (mode {:o})", meta.mode() & 0o777))
}

/// Read and parse the recipe at `path`; `FILE:SELECTOR` (srtctl's form) is the one variant of
/// an override file that the selector picks.
pub fn load_file(path: &Path) -> Result<Recipe, RecipeError> {
    let (file, selector) = super::variants::split_selector(path);
    let (text, said) = read_text_said(&file)?;
    let mut recipe = match selector {
        None => parse_str(&file, &text),
        Some(sel) => {
            let text = selected(&file, &text, &sel)?;
            parse_str(&file, &text)
        }
    }?;
    recipe.file_warnings = said;
    Ok(recipe)
}

/// The text of the one variant `sel` picks in the override file `path`.
pub fn selected(path: &Path, text: &str, sel: &str) -> Result<String, RecipeError> {
    let doc: serde_yaml::Value = match serde_yaml::from_str(text) {
        Ok(d) => d,
        // Not YAML: the parser says where.
        Err(_) => return parse_str(path, text).map(|_| text.to_string()),
    };
    let mut v = super::variants::expand(&doc, Some(sel)).map_err(|e| variant_error(path, e))?;
    if v.len() != 1 {
        return Err(RecipeError::invalid(
            path,
            "",
            None,
            format!(
                "`:{sel}` selects {} variants ({}); one recipe is one job",
                v.len(),
                v.iter().map(|v| v.label()).collect::<Vec<_>>().join(", ")
            ),
            Some("select one (`:zip_override_<name>[N]`, `:override_<name>`), or render/submit the selection".into()),
        ));
    }
    Ok(super::variants::to_text(&v.remove(0).recipe))
}

/// A variant error as a recipe error of `path`.
pub fn variant_error(path: &Path, e: super::variants::VariantError) -> RecipeError {
    RecipeError::invalid(path, e.key_path, None, e.message, Some(e.fix))
}

/// The recipe's text (for callers that keep it, as `migrate` and `render` do): a regular file
/// of at most [`MAX_RECIPE_BYTES`], in UTF-8.
pub fn read_text(path: &Path) -> Result<String, RecipeError> {
    read_text_said(path).map(|(text, _)| text)
}

/// [`read_text`], and what the plan should say about the file (another user could write it).
fn read_text_said(path: &Path) -> Result<(String, Vec<String>), RecipeError> {
    let mut said = Vec::new();
    let bytes = match read_input_file(path, MAX_RECIPE_BYTES) {
        Ok(f) => {
            if let Some(why) = others_could_write(&f.meta) {
                said.push(format!(
                    "the recipe {} {why}: whoever can write it decides what this job runs (chmod go-w it, or keep your recipes in a directory of your own)",
                    path.display()
                ));
            }
            f.bytes
        }
        Err(InputFileError::Io(source)) => {
            return Err(RecipeError::Io {
                path: path.into(),
                source,
            })
        }
        Err(InputFileError::Directory) => {
            return Err(RecipeError::IsDirectory { path: path.into() })
        }
        Err(e @ InputFileError::NotRegular { .. }) => {
            return Err(RecipeError::invalid(
                path,
                "",
                None,
                format!("the recipe {e}"),
                Some("pass the YAML recipe itself: a regular file, or a pipe such as `--recipe <(cat job.yaml)`".into()),
            ))
        }
        Err(e @ InputFileError::TooLarge { .. }) => {
            return Err(RecipeError::invalid(
                path,
                "",
                None,
                format!("the file {e}: more than any recipe should be"),
                Some(format!(
                    "check that --recipe names the YAML recipe (recipes are a few KiB; mcsup reads at most {})",
                    mib(MAX_RECIPE_BYTES)
                )),
            ))
        }
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        RecipeError::invalid(
            path,
            "",
            None,
            format!(
                "the file is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            Some("save the recipe as UTF-8".into()),
        )
    })?;
    Ok((text, said))
}

/// Where the YAML in `text` first nests deeper than [`MAX_YAML_DEPTH`] (see [`structure`]):
/// (key path, line, column).
#[cfg(test)]
fn too_deep(text: &str) -> Option<(String, usize, usize)> {
    match structure(text)? {
        Structure::TooDeep(path, line, col) => Some((path, line, col)),
        Structure::Duplicate(..) => None,
    }
}

/// What [`structure`] found wrong with a document's shape.
enum Structure {
    /// Nested deeper than [`MAX_YAML_DEPTH`]: (key path, line, column).
    TooDeep(String, usize, usize),
    /// A mapping with the same key twice: (the mapping's path, the key, the first one's line,
    /// line and column of the second). serde would keep the last silently.
    Duplicate(String, String, usize, usize, usize),
}

/// The first problem of shape in `text`: nested deeper than [`MAX_YAML_DEPTH`], or a key given
/// twice in one mapping (YAML forbids it; the loaders srtctl uses would keep one of them without a
/// word).
///
/// One pass of an event parser that stops at the first event past the limit, so a hostile
/// document costs O(size x limit). Documents it cannot read are left to serde_yaml to report,
/// after a token-level pass that bounds the flow nesting (the costly kind) on its own.
///
/// The scanner looks ahead past an open `[` (it may start a key), so 255 nested flow
/// collections fail it ("recursion limit exceeded", its flow level is a `u8`) before the
/// parser emits the event at depth 65: that error means too deep as well.
fn structure(text: &str) -> Option<Structure> {
    use yaml_rust2::parser::{Event, Parser};
    enum Frame {
        Map {
            name: String,
            key: Option<String>,
            seen: std::collections::HashMap<String, usize>,
        },
        Seq {
            name: String,
            next: usize,
        },
    }
    // The name of the node an event starts under the top frame; None for a mapping's key.
    fn child(stack: &mut [Frame]) -> Option<String> {
        match stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Map { key, .. }) => key.take(),
            Some(Frame::Seq { next, .. }) => {
                *next += 1;
                Some(format!("[{}]", *next - 1))
            }
        }
    }
    fn path(stack: &[Frame]) -> String {
        let mut out = String::new();
        for (i, f) in stack.iter().enumerate() {
            if i == 4 {
                out.push_str("...");
                break;
            }
            let (Frame::Map { name, .. } | Frame::Seq { name, .. }) = f;
            if !out.is_empty() && !name.starts_with('[') {
                out.push('.');
            }
            out.push_str(name);
        }
        out
    }
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    loop {
        let (event, mark) = match parser.next_token() {
            Ok(t) => t,
            Err(e) if is_depth_error(&e) => {
                return Some(Structure::TooDeep(
                    path(&stack),
                    e.marker().line(),
                    e.marker().col() + 1,
                ))
            }
            Err(_) => return too_deep_flow(text).map(|(p, l, c)| Structure::TooDeep(p, l, c)),
        };
        match event {
            Event::StreamEnd => return None,
            Event::DocumentStart => stack.clear(),
            Event::Scalar(value, ..) => match stack.last_mut() {
                Some(Frame::Map {
                    key: k @ None,
                    seen,
                    ..
                }) => {
                    // `<<` (a merge key) may come more than once in spirit; YAML itself still
                    // forbids the same key twice, merge keys aside.
                    if value != "<<" {
                        if let Some(first) = seen.insert(value.clone(), mark.line()) {
                            return Some(Structure::Duplicate(
                                path(&stack),
                                value,
                                first,
                                mark.line(),
                                mark.col() + 1,
                            ));
                        }
                    }
                    *k = Some(value)
                }
                _ => {
                    child(&mut stack);
                }
            },
            Event::Alias(_) => match stack.last_mut() {
                Some(Frame::Map { key: k @ None, .. }) => *k = Some("*".into()),
                _ => {
                    child(&mut stack);
                }
            },
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                // A collection used as a mapping key has no name of its own.
                let name = child(&mut stack).unwrap_or_else(|| "?".into());
                stack.push(if matches!(event, Event::MappingStart(..)) {
                    Frame::Map {
                        name,
                        key: None,
                        seen: Default::default(),
                    }
                } else {
                    Frame::Seq { name, next: 0 }
                });
                if stack.len() > MAX_YAML_DEPTH {
                    return Some(Structure::TooDeep(
                        path(&stack),
                        mark.line(),
                        mark.col() + 1,
                    ));
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
            }
            _ => {}
        }
    }
}

/// [`structure`]'s depth bound for text the event parser rejects: flow collections counted token
/// by token (the scanner is libyaml's, ported, so it tokenizes `[` and `{` as libyaml does).
fn too_deep_flow(text: &str) -> Option<(String, usize, usize)> {
    use yaml_rust2::scanner::{Scanner, TokenType};
    let mut depth = 0usize;
    let mut scanner = Scanner::new(text.chars());
    for yaml_rust2::scanner::Token(mark, token) in &mut scanner {
        match token {
            TokenType::FlowSequenceStart | TokenType::FlowMappingStart => {
                depth += 1;
                if depth > MAX_YAML_DEPTH {
                    return Some((String::new(), mark.line(), mark.col() + 1));
                }
            }
            TokenType::FlowSequenceEnd | TokenType::FlowMappingEnd => {
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    scanner
        .get_error()
        .filter(is_depth_error)
        .map(|e| (String::new(), e.marker().line(), e.marker().col() + 1))
}

fn is_depth_error(e: &yaml_rust2::ScanError) -> bool {
    e.info() == "recursion limit exceeded"
}

/// Parse recipe text; `path` is only used in messages.
pub fn parse_str(path: &Path, text: &str) -> Result<Recipe, RecipeError> {
    // A byte-order mark (some Windows editors write one) is not part of the document.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() || only_comments(text) {
        return Err(RecipeError::Empty { path: path.into() });
    }
    // A document that is just `null`/`~` is as empty as an empty file.
    if matches!(text.trim(), "~" | "null" | "---" | "--- ~" | "---\n~") {
        return Err(RecipeError::Empty { path: path.into() });
    }
    match structure(text) {
        Some(Structure::TooDeep(key_path, line, col)) => {
            return Err(RecipeError::invalid(
                path,
                key_path,
                Some((line, col)),
                format!("lists and mappings nest deeper than {MAX_YAML_DEPTH} levels here"),
                Some(format!("flatten this section: recipes nest a few levels deep; mcsup reads at most {MAX_YAML_DEPTH} levels, which keeps parsing fast")),
            ));
        }
        Some(Structure::Duplicate(map, key, first, line, col)) => {
            let key_path = if map.is_empty() {
                key.clone()
            } else {
                format!("{map}.{key}")
            };
            return Err(RecipeError::invalid(
                path,
                key_path,
                Some((line, col)),
                format!("`{key}` is given twice in this mapping (first on line {first}): only one of the two values would count, without a word"),
                Some("keep one of them".into()),
            ));
        }
        None => {}
    }
    if text.contains("sweep") || text.contains("base") {
        if let Ok(doc) = serde_yaml::from_str::<serde_yaml::Value>(text) {
            several_jobs(path, &doc)?;
        }
    }
    // YAML merge keys (`<<: *defaults`), which srtctl's loader applies: applied here too, from
    // the document as a value (an error then has its key path but no line).
    let merged = if text.contains("<<") {
        let mut v: serde_yaml::Value =
            serde_path_to_error::deserialize(serde_yaml::Deserializer::from_str(text))
                .map_err(|e| convert(path, text, e))?;
        v.apply_merge().map_err(|e| {
            RecipeError::invalid(
                path,
                String::new(),
                None,
                format!("a merge key (`<<`) cannot be applied: {e}"),
                Some(
                    "`<<:` takes an alias of a mapping (`<<: *defaults`) or a list of them".into(),
                ),
            )
        })?;
        Some(v)
    } else {
        None
    };
    let parsed = match &merged {
        Some(v) => serde_path_to_error::deserialize::<_, Recipe>(v.clone()),
        None => {
            serde_path_to_error::deserialize::<_, Recipe>(serde_yaml::Deserializer::from_str(text))
        }
    };
    match parsed {
        Ok(mut r) => {
            r.positions = super::locate::KeyIndex::build(text);
            // The sections read untyped see the document the typed ones saw (merged).
            r.raw = merged.unwrap_or_else(|| serde_yaml::from_str(text).unwrap_or_default());
            Ok(r)
        }
        Err(e) => Err(convert(path, text, e)),
    }
}

/// A file that is several jobs (srtctl's sweep or override form) is not one recipe: refused
/// with what it holds and how to run it (render/submit expand it; a selector picks one variant).
fn several_jobs(path: &Path, doc: &serde_yaml::Value) -> Result<(), RecipeError> {
    use super::variants::{expand, Form};
    let jobs = |doc| match expand(doc, None) {
        Ok(v) => {
            let names: Vec<String> = v.iter().take(4).map(|v| v.label()).collect();
            let more = if v.len() > 4 { ", ..." } else { "" };
            format!("{} job(s): {}{more}", v.len(), names.join("; "))
        }
        Err(e) => format!(
            "no job: {}{} {}",
            e.key_path,
            if e.key_path.is_empty() { "" } else { ":" },
            e.message
        ),
    };
    let file = path.display();
    match Form::of(doc) {
        Form::Single => Ok(()),
        Form::Sweep => Err(RecipeError::invalid(
            path,
            "sweep",
            None,
            format!(
                "this file is a sweep, several jobs as srtctl expands it ({}), not one recipe",
                jobs(doc)
            ),
            Some(format!(
                "`mcsup render -f {file} -o DIR` writes each job's expanded recipe (DIR/<job name>/recipe.yaml, which `mcsup plan` takes) and batch script; `mcsup submit -f {file}` submits them all"
            )),
        )),
        Form::Override => Err(RecipeError::invalid(
            path,
            "base",
            None,
            format!(
                "this file is an override file, `base:` and its variants ({}), not one recipe",
                jobs(doc)
            ),
            Some(format!(
                "pick one variant with `{file}:SELECTOR` (`:override_<name>`, `:zip_override_<name>[N]`, `:base`), or `mcsup render -f {file} -o DIR` / `mcsup submit -f {file}` for every variant"
            )),
        )),
    }
}

fn only_comments(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
    })
}

fn convert(
    path: &Path,
    text: &str,
    e: serde_path_to_error::Error<serde_yaml::Error>,
) -> RecipeError {
    let mut key_path = render_path(e.path());
    let inner = e.inner();
    let mut position = inner.location().map(|l| (l.line(), l.column()));
    let raw = inner.to_string();
    // serde_yaml appends " at line L column C" to its messages; we print the position ourselves.
    let raw = strip_position(&raw);
    let raw = strip_path_prefix(&raw);
    // A check inside a value may name the key it is about (`http.path`, `MC_GID_INDEX`, `[1]`).
    let (sub, rest) = split_at_key(&raw);
    let named_sub = sub.is_some_and(|s| !s.is_empty());
    if let Some(sub) = sub.filter(|s| !s.is_empty()) {
        key_path = if sub.starts_with('[') || key_path.is_empty() {
            format!("{key_path}{sub}")
        } else {
            format!("{key_path}.{sub}")
        };
    }
    let raw = rest.to_string();
    // The parser reports where it stands when a check fails: for a check on a whole block that
    // is often the start of the enclosing entry, before the key. The key's own line is better
    // then, and always when the message named the key inside the value.
    if !key_path.is_empty() {
        if let Some(at) = super::locate::KeyIndex::build(text).find_exact(&key_path) {
            if named_sub || position.is_none_or(|p| p < at) {
                position = Some(at);
            }
        }
    }
    let (mut message, fix) = match raw.split_once(FIX_MARKER) {
        Some((m, f)) => (m.to_string(), Some(f.to_string())),
        None => explain(&raw),
    };
    // A flag given twice: the parser stands at the start of the flag map; point at the second
    // key and name the first's line.
    if let Some((first, second)) = duplicate_flag_keys(&message) {
        let index = super::locate::KeyIndex::build(text);
        let first_at = index.find_exact(&join(&key_path, first));
        // Keys before the second have distinct flags, so the first key spelled like the second
        // is the second itself, unless both are spelled alike.
        let second_at = if first == second {
            first_at.and_then(|at| next_key_in_column(text, at, second))
        } else {
            index.find_exact(&join(&key_path, second))
        };
        let (first, second) = (first.to_string(), second.to_string());
        if let Some((line, _)) = first_at {
            message.push_str(&format!("; `{first}` is on line {line}"));
        }
        if second_at.is_some() {
            position = second_at;
        }
        key_path = join(&key_path, &second);
    }
    if raw.starts_with("invalid type: string") && key_path.is_empty() {
        return RecipeError::invalid(
            path,
            "",
            position,
            "the file is not a YAML mapping (it parsed as a plain string)",
            Some("a recipe is a mapping with a `backend:` section; check the file's indentation and that it is the right file".into()),
        );
    }
    // The path ends at the map that holds a bad key; make it point at the key itself.
    let key_path = match unknown_key(&raw) {
        Some(k) if !key_path.ends_with(&k) => join(&key_path, &k),
        _ => key_path,
    };
    RecipeError::invalid(path, key_path, position, message, fix)
}

/// The next line after `at` (1-based line, column) where block-mapping key `key` starts in the
/// same column, before the mapping ends (a non-blank line indented less).
fn next_key_in_column(text: &str, at: (usize, usize), key: &str) -> Option<(usize, usize)> {
    let col = at.1.checked_sub(1)?;
    for (i, line) in text.lines().enumerate().skip(at.0) {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if indent < col {
            return None;
        }
        if indent == col
            && t.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with(':'))
        {
            return Some((i + 1, at.1));
        }
    }
    None
}

fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

fn render_path(p: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in p.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Enum { variant } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(variant);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// serde_yaml prefixes nested errors with its own dotted path ("a.b[0].c: msg"); we print ours.
fn strip_path_prefix(msg: &str) -> String {
    match msg.split_once(": ") {
        Some((prefix, rest))
            if !prefix.is_empty() && !prefix.contains(' ') && !prefix.contains('`') =>
        {
            rest.to_string()
        }
        _ => msg.to_string(),
    }
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) if msg[i..].contains(" column ") => msg[..i].to_string(),
        _ => msg.to_string(),
    }
}

/// The offending name in serde's "unknown field `x`" / "unknown variant `x`" messages.
fn unknown_key(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// Names listed in "expected one of `a`, `b`" / "expected `a` or `b`".
fn expected_names(msg: &str) -> Vec<String> {
    let Some(i) = msg.find("expected") else {
        return Vec::new();
    };
    msg[i..]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Turn serde's built-in messages into (message, fix).
fn explain(raw: &str) -> (String, Option<String>) {
    if let Some(rest) = raw
        .strip_prefix("unknown field `")
        .or_else(|| raw.strip_prefix("unknown variant `"))
    {
        let bad = &rest[..rest.find('`').unwrap_or(rest.len())];
        let expected = expected_names(raw);
        let what = if raw.starts_with("unknown field") {
            "key"
        } else {
            "value"
        };
        let message = format!("unknown {what} `{bad}`");
        let closest =
            crate::domain::suggest(bad, expected.iter().map(String::as_str)).map(str::to_string);
        let list = expected
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let fix = match (closest, expected.is_empty()) {
            (Some(c), _) => format!("did you mean `{c}`? (valid: {list})"),
            (None, false) => format!("valid {what}s here: {list}"),
            (None, true) => "remove it".to_string(),
        };
        return (message, Some(fix));
    }
    if let Some(rest) = raw.strip_prefix("missing field `") {
        let name = &rest[..rest.find('`').unwrap_or(rest.len())];
        return (
            format!("required key `{name}` is missing"),
            Some(format!("add `{name}:`")),
        );
    }
    if let Some(rest) = raw.strip_prefix("duplicate field `") {
        let name = &rest[..rest.find('`').unwrap_or(rest.len())];
        return (
            format!("key `{name}` appears twice"),
            Some(format!("keep one `{name}:`")),
        );
    }
    if raw.starts_with("invalid type: ") {
        let fix = if raw.contains("expected an engine type string") {
            Some("write `engine: sglang` or `engine: {type: sglang}`".to_string())
        } else if raw.contains("expected a recipe") {
            Some("a recipe is a YAML mapping whose top level has `backend:` (and optionally `mcsup:`); see recipes/local.yaml".to_string())
        } else if raw.contains("expected a boolean") {
            Some("write true or false".to_string())
        } else if raw.contains("expected a sequence") || raw.contains("expected a list") {
            Some("write a YAML list, e.g. [a, b]".to_string())
        } else if raw.contains("expected struct")
            || raw.contains("expected a mapping")
            || raw.contains("expected map")
        {
            Some("write a YAML mapping (key: value lines indented under this key)".to_string())
        } else if raw.contains("expected a string") {
            Some("quote the value".to_string())
        } else if raw.contains("expected u32")
            || raw.contains("expected i32")
            || raw.contains("expected u16")
            || raw.contains("expected f64")
        {
            Some("write a plain number".to_string())
        } else {
            None
        };
        return (raw.to_string(), fix);
    }
    if raw.starts_with("invalid value: integer")
        && (raw.contains("expected u32") || raw.contains("expected u16"))
    {
        return (
            raw.to_string(),
            Some("use a non-negative whole number in range".into()),
        );
    }
    if raw.contains("did not find expected")
        || raw.contains("found character that cannot start")
        || raw.contains("mapping values are not allowed")
        || raw.contains("while parsing")
        || raw.contains("while scanning")
    {
        return (
            format!("YAML syntax error: {raw}"),
            Some(
                "check indentation (spaces, not tabs), colons and quotes around this position"
                    .into(),
            ),
        );
    }
    (raw.to_string(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round 4's D15: a recipe another user could change is run, but the plan says so.
    #[test]
    fn a_recipe_others_can_write_is_said_in_the_plans_warnings() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.yaml");
        std::fs::write(&p, "name: x\nbackend: {type: sglang}\n").unwrap();
        let mode = |m| std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
        mode(0o644);
        assert!(load_file(&p).unwrap().file_warnings.is_empty());
        mode(0o666);
        let w = load_file(&p).unwrap().file_warnings;
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("can be written by others (mode 666)"),
            "{w:?}"
        );
        if nix::unistd::geteuid().is_root() {
            mode(0o644);
            nix::unistd::chown(&p, Some(nix::unistd::Uid::from_raw(1000)), None).unwrap();
            let w = load_file(&p).unwrap().file_warnings;
            assert!(w[0].contains("is owned by uid 1000"), "{w:?}");
        }
    }

    /// The sections mcsup reads from the raw document (`resources`, `model`, ...) see merge keys
    /// applied as the typed ones do.
    #[test]
    fn merge_keys_reach_the_raw_document_too() {
        let text = "x-res: &res\n  gpus_per_node: 4\nresources:\n  <<: *res\n  prefill_nodes: 1\nbackend:\n  type: sglang\n";
        let r = parse_str(Path::new("t.yaml"), text).unwrap();
        assert_eq!(
            r.raw_get(&["resources", "gpus_per_node"])
                .and_then(|v| v.as_u64()),
            Some(4)
        );
        assert_eq!(
            r.raw_get(&["resources", "prefill_nodes"])
                .and_then(|v| v.as_u64()),
            Some(1)
        );
    }

    #[test]
    fn nesting_is_bounded_exactly() {
        // The top-level mapping is level 1, `a:`'s list level 2.
        let flow = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert_eq!(too_deep(&flow(MAX_YAML_DEPTH - 1)), None);
        let (path, line, _) = too_deep(&flow(MAX_YAML_DEPTH)).unwrap();
        assert_eq!((path.as_str(), line), ("a[0][0]...", 1));
        // Past the scanner's own flow limit (255), and through the token-level fallback.
        assert!(too_deep(&flow(300)).is_some());
        assert!(too_deep_flow(&"[".repeat(300)).is_some());
        assert_eq!(too_deep_flow(&"[".repeat(MAX_YAML_DEPTH)), None);
        let block = |n: usize| {
            (0..n)
                .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
                .collect::<String>()
                + &format!("{}v: 1\n", "  ".repeat(n))
        };
        assert_eq!(too_deep(&block(MAX_YAML_DEPTH - 1)), None);
        assert_eq!(too_deep(&block(MAX_YAML_DEPTH)).unwrap().0, "k0.k1.k2...");
        // Every document of a stream counts (serde_yaml parses the second to refuse it).
        assert!(too_deep(&format!("a: 1\n---\n{}", flow(100))).is_some());
    }

    #[test]
    fn a_fifo_is_read_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let path = fifo.clone();
        let writer = std::thread::spawn(move || {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            let _ = f.write_all(&[b'#'; 5000]);
        });
        assert!(matches!(
            read_input_file(&fifo, 4096),
            Err(InputFileError::TooLarge { limit: 4096 })
        ));
        writer.join().unwrap();
        assert!(matches!(
            read_input_file(Path::new("/dev/null"), 10),
            Err(InputFileError::NotRegular {
                kind: "a character device"
            })
        ));
        assert!(matches!(
            read_input_file(dir.path(), 10),
            Err(InputFileError::Directory)
        ));
    }
}
