//! Splitting a child's output into lines of bounded length (see [`LineSplitter`]).

/// Splits a byte stream into lines of at most `cap` bytes (without the newline).
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    cap: usize,
}

impl LineSplitter {
    /// A splitter keeping lines of at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        LineSplitter {
            buf: Vec::new(),
            cap: cap.max(1),
        }
    }

    /// Feed bytes; `emit(line, split)` is called for each complete line or full piece (`split`
    /// = the line goes on in the next piece).
    pub fn push(&mut self, mut data: &[u8], emit: &mut dyn FnMut(&[u8], bool)) {
        while !data.is_empty() {
            let nl = data.iter().position(|&b| b == b'\n');
            let (mut chunk, complete) = match nl {
                Some(p) => (&data[..p], true),
                None => (data, false),
            };
            data = match nl {
                Some(p) => &data[p + 1..],
                None => &[],
            };
            while chunk.len() > self.cap - self.buf.len() {
                let room = self.cap - self.buf.len();
                if self.buf.is_empty() {
                    emit(&chunk[..room], true);
                } else {
                    self.buf.extend_from_slice(&chunk[..room]);
                    let piece = std::mem::take(&mut self.buf);
                    emit(&piece, true);
                    self.buf = piece;
                    self.buf.clear();
                }
                chunk = &chunk[room..];
            }
            if complete {
                if self.buf.is_empty() {
                    emit(chunk, false);
                } else {
                    self.buf.extend_from_slice(chunk);
                    let line = std::mem::take(&mut self.buf);
                    emit(&line, false);
                    self.buf = line;
                    self.buf.clear();
                }
            } else {
                self.buf.extend_from_slice(chunk);
            }
        }
    }

    /// End of stream: the last line without a newline is still a line.
    pub fn finish(&mut self, emit: &mut dyn FnMut(&[u8], bool)) {
        if !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            emit(&line, false);
        }
    }

    /// Bytes currently buffered (bounded by the cap).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(cap: usize, chunks: &[&[u8]]) -> Vec<(Vec<u8>, bool)> {
        let mut s = LineSplitter::new(cap);
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut |l, sp| out.push((l.to_vec(), sp)));
            assert!(s.buffered() <= cap);
        }
        s.finish(&mut |l, sp| out.push((l.to_vec(), sp)));
        out
    }

    #[test]
    fn splits_lines_across_chunks() {
        let out = split_all(100, &[b"ab", b"c\nde", b"f\n\ng"]);
        let lines: Vec<_> = out
            .iter()
            .map(|(l, _)| String::from_utf8_lossy(l).to_string())
            .collect();
        assert_eq!(lines, ["abc", "def", "", "g"]);
        assert!(out.iter().all(|(_, s)| !s));
    }

    #[test]
    fn long_lines_are_split_and_bounded() {
        let big = [b'x'; 25];
        let out = split_all(10, &[&big[..7], &big[7..], b"\nok\n"]);
        let lens: Vec<_> = out.iter().map(|(l, s)| (l.len(), *s)).collect();
        assert_eq!(lens, [(10, true), (10, true), (5, false), (2, false)]);
    }

    #[test]
    fn exact_cap_line_is_not_split() {
        let out = split_all(4, &[b"abcd\n"]);
        assert_eq!(out, [(b"abcd".to_vec(), false)]);
    }

    #[test]
    fn last_partial_line_is_kept() {
        let out = split_all(64, &[b"one\ntwo"]);
        assert_eq!(out.last().map(|(l, _)| l.as_slice()), Some(&b"two"[..]));
    }
}
