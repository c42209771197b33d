//! A known failure line: what a process prints when a known thing went wrong, what it means and
//! the fix. The catalogues are the engine seam's (`crate::engine::signatures`: engines, CUDA,
//! NCCL, Python, the OS) and Mooncake's (`crate::mooncake::signatures`); the supervisor watches
//! every child's output for all of them and writes a `diagnosis` event per match. Pure.

/// How a signature's match is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// As soon as the line is seen: the line means trouble by itself.
    AtOnce,
    /// At once too, but it only says that something failed and that the cause is another line
    /// (SGLang's "Scheduler hit an exception", vLLM's "See root cause above"): a reader looking
    /// for the cause prefers any other diagnosis of the same run.
    AtOncePointer,
    /// A Python traceback: its final exception line is kept, and reported only when the process
    /// then fails (healthy servers log tracebacks of cancelled requests; srt-slurm 2.0's
    /// `health_check` docs say why a bare traceback is no failure).
    WhenItFails,
}

impl Reported {
    /// Whether a match is reported as soon as it is seen.
    pub fn at_once(self) -> bool {
        matches!(self, Reported::AtOnce | Reported::AtOncePointer)
    }
}

/// One known failure line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    /// Stable name (`cuda-oom`), in the event.
    pub id: &'static str,
    /// Plain substrings, any of which marks the line (the watch finds them all in one pass).
    pub needles: &'static [&'static str],
    /// What it means, in one clause.
    pub what: &'static str,
    pub fix: &'static str,
    /// Where the line and its meaning come from (file, issue).
    pub source: &'static str,
    pub reported: Reported,
}

impl Signature {
    /// Whether `line` holds one of its needles.
    pub fn matches(&self, line: &[u8]) -> bool {
        self.needles
            .iter()
            .any(|n| memchr::memmem::find(line, n.as_bytes()).is_some())
    }
}

/// The first signature of `catalogue` that `line` matches.
pub fn first_match<'a>(
    catalogue: impl IntoIterator<Item = &'a Signature>,
    line: &[u8],
) -> Option<&'a Signature> {
    catalogue.into_iter().find(|s| s.matches(line))
}

/// Longest line an event or `mcsup why` shows (characters).
pub const SHOWN_CHARS: usize = 400;

/// A line as an event shows it: lossy UTF-8, without its line end, its terminal escape
/// sequences (colours, and anything that would act on a reader's terminal: titles, clipboard,
/// screen clears) removed and other control characters but tab shown as `?`, at most `max`
/// characters (with " …" when cut).
pub fn shown_line(line: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(line);
    let text = without_escapes(text.trim_end(), false);
    let mut shown: String = text.chars().take(max).collect();
    if shown.len() < text.len() {
        shown.push_str(" …");
    }
    shown
}

/// `text` made safe for a reader's terminal: what [`shown_line`] removes and replaces, line ends
/// kept. Every view mcsup prints goes through it (names and details come from files anyone with
/// access to the log directory could have written); text without control characters is returned
/// as it is.
pub fn for_terminal(text: &str) -> std::borrow::Cow<'_, str> {
    if text
        .chars()
        .all(|c| (!c.is_control() || c == '\n' || c == '\t') && !bidi_control(c))
    {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(without_escapes(text, true))
}

/// The bidirectional embeddings, overrides and isolates (U+202A–202E, U+2066–2069): not control
/// characters to Unicode, but they reorder what a terminal shows after them (round 4's L6: a
/// status file's `reason` with U+202E printed backwards), as in "Trojan Source".
fn bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` without ECMA-48 escape sequences (CSI `ESC [ … final`, OSC/DCS/APC/PM strings up to
/// BEL or `ESC \`, two-byte `ESC x`), and its other control characters but tab (and line feed,
/// when `lines`) as `?`.
fn without_escapes(text: &str, lines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                Some('[') => {
                    // Parameters and intermediates, then one final byte in @..~.
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']' | 'P' | '_' | '^' | 'X') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' || (c == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\t' => out.push(c),
            '\n' if lines => out.push(c),
            c if c.is_control() || bidi_control(c) => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Signature = Signature {
        id: "x",
        needles: &["boom", "bang"],
        what: "w",
        fix: "f",
        source: "s",
        reported: Reported::AtOnce,
    };

    #[test]
    fn a_signature_matches_any_of_its_needles() {
        assert!(S.matches(b"a bang here"));
        assert!(!S.matches(b"bam"));
        assert_eq!(first_match([&S], b"boom").map(|s| s.id), Some("x"));
        assert_eq!(first_match([&S], b"nothing"), None);
    }

    #[test]
    fn shown_lines_lose_their_escapes_and_control_characters() {
        let dynamo = b"\x1b[2m2026-12-04T05:03:46.181172Z\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2mdynamo_llm::mocker\x1b[0m\x1b[2m:\x1b[0m Metrics background tasks started";
        assert_eq!(
            shown_line(dynamo, 400),
            "2026-12-04T05:03:46.181172Z  INFO dynamo_llm::mocker: Metrics background tasks started"
        );
        // A window title, a clipboard write, a screen clear, a bell and a carriage return.
        let hostile = b"a\x1b]0;owned\x07b\x1b]52;c;aGk=\x1b\\c\x1b[2J\x1bcd\x07\re\tf";
        assert_eq!(shown_line(hostile, 400), "abcd??e\tf");
        let view = "n1\x1b]0;owned\x07 up\n  w\x1b[2J\tready\r\n";
        assert_eq!(for_terminal(view), "n1 up\n  w\tready?\n");
        assert!(matches!(
            for_terminal("plain\n\ttext"),
            std::borrow::Cow::Borrowed(_)
        ));
        // Bidi overrides and isolates reorder what follows them on the screen.
        assert_eq!(
            for_terminal("failed \u{202e}RTL\u{202c} x\u{2066}y\u{2069}"),
            "failed ?RTL? x?y?"
        );
        assert_eq!(shown_line("a\u{202d}b".as_bytes(), 10), "a?b");
        // Other right-to-left text stays as it is.
        assert_eq!(for_terminal("שלום"), "שלום");
    }

    #[test]
    fn shown_lines_are_trimmed_and_cut() {
        assert_eq!(shown_line(b"abc\r\n", 10), "abc");
        assert_eq!(shown_line(b"abcdef", 3), "abc …");
        assert_eq!(shown_line(&[0xff, b'a'], 10), "\u{fffd}a");
    }
}
