//! An incremental parser for `text/event-stream` (the WHATWG rules: `\n`,
//! `\r\n` and `\r` line ends, `:` comments, multi-line `data`). Input may be
//! split anywhere, even inside a `\r\n`; events come out whole.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    data: String,
    has_data: bool,
    event: Option<String>,
    /// An event larger than this is dropped (and counted) rather than held.
    max_event_bytes: usize,
    pub dropped_events: u32,
}

impl SseParser {
    pub fn new() -> Self {
        Self {
            max_event_bytes: 16 << 20,
            ..Self::default()
        }
    }

    /// Feeds bytes; calls `on_event` for each event they complete.
    pub fn push(&mut self, chunk: &[u8], on_event: &mut dyn FnMut(SseEvent)) {
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            match self.buf[i] {
                b'\n' => {
                    self.line(start, i, on_event);
                    i += 1;
                    start = i;
                }
                b'\r' => {
                    if i + 1 == self.buf.len() {
                        // Might be the first half of `\r\n`: wait for more.
                        break;
                    }
                    self.line(start, i, on_event);
                    i += if self.buf[i + 1] == b'\n' { 2 } else { 1 };
                    start = i;
                }
                _ => i += 1,
            }
        }
        self.buf.drain(..start);
        if self.buf.len() > self.max_event_bytes {
            self.buf.clear();
            self.reset_event();
            self.dropped_events += 1;
        }
    }

    /// Ends the stream: a final event without its blank line still counts.
    pub fn finish(&mut self, on_event: &mut dyn FnMut(SseEvent)) {
        if !self.buf.is_empty() {
            let end = self.buf.len();
            let end = if self.buf[end - 1] == b'\r' {
                end - 1
            } else {
                end
            };
            self.line(0, end, on_event);
            self.buf.clear();
        }
        self.dispatch(on_event);
    }

    fn line(&mut self, start: usize, end: usize, on_event: &mut dyn FnMut(SseEvent)) {
        if start == end {
            self.dispatch(on_event);
            return;
        }
        let line = String::from_utf8_lossy(&self.buf[start..end]).into_owned();
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_str(), ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() > self.max_event_bytes {
                    self.reset_event();
                    self.dropped_events += 1;
                    return;
                }
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
    }

    fn dispatch(&mut self, on_event: &mut dyn FnMut(SseEvent)) {
        if self.has_data {
            let mut data = std::mem::take(&mut self.data);
            if data.ends_with('\n') {
                data.pop();
            }
            on_event(SseEvent {
                event: self.event.take(),
                data,
            });
        }
        self.reset_event();
    }

    fn reset_event(&mut self) {
        self.data.clear();
        self.has_data = false;
        self.event = None;
    }
}

/// All events of a complete byte stream.
pub fn parse_all(bytes: &[u8]) -> (Vec<SseEvent>, u32) {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    parser.push(bytes, &mut |e| events.push(e));
    parser.finish(&mut |e| events.push(e));
    (events, parser.dropped_events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn parses_events_split_at_every_byte() {
        let stream = b"data: {\"a\":1}\r\n\r\n: keep-alive\n\nevent: ping\ndata: x\ndata: y\n\ndata:[DONE]\n\n";
        let (whole, _) = parse_all(stream);
        assert_eq!(data(&whole), vec!["{\"a\":1}", "x\ny", "[DONE]"]);
        assert_eq!(whole[1].event.as_deref(), Some("ping"));
        // Every split point gives the same events.
        for cut in 0..stream.len() {
            let mut p = SseParser::new();
            let mut got = Vec::new();
            p.push(&stream[..cut], &mut |e| got.push(e));
            p.push(&stream[cut..], &mut |e| got.push(e));
            p.finish(&mut |e| got.push(e));
            assert_eq!(got, whole, "split at {cut}");
        }
    }

    #[test]
    fn bare_carriage_returns_end_lines() {
        let (events, _) = parse_all(b"data: a\r\rdata: b\r\r");
        assert_eq!(data(&events), vec!["a", "b"]);
    }

    #[test]
    fn a_last_event_without_blank_line_is_kept() {
        let (events, _) = parse_all(b"data: tail");
        assert_eq!(data(&events), vec!["tail"]);
    }

    #[test]
    fn oversized_events_are_dropped_not_held() {
        let mut p = SseParser::new();
        p.max_event_bytes = 64;
        let mut got = Vec::new();
        let big = format!("data: {}\n\ndata: ok\n\n", "x".repeat(100));
        p.push(big.as_bytes(), &mut |e| got.push(e));
        assert_eq!(data(&got), vec!["ok"]);
        assert_eq!(p.dropped_events, 1);
    }
}
