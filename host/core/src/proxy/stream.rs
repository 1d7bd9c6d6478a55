//! A streamed answer: forwarded chunk by chunk as it arrives, translated
//! event by event when the client speaks another API, with a copy kept for
//! the record.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream::BoxStream};
use metaclaw_wire::ApiFormat;
use metaclaw_wire::stream::sse::SseParser;
use metaclaw_wire::stream::{Chain, encode};
use tokio::time::Sleep;

use super::capture;
use super::record::{Outcome, TurnCtx};
use crate::store::Capture;

/// The most of one answer kept for the record; the client still gets all.
const CAPTURE_LIMIT: usize = 32 << 20;

/// Forwards an upstream SSE body chunk by chunk as it arrives (translated
/// event by event when the client speaks another API), keeping a copy of
/// the upstream's bytes for the record; ends the stream with an error event
/// in the client's API if the upstream stalls or fails (never a silent
/// retry: the client already has part of the answer); records the turn when
/// the stream ends or the client drops it.
pub(super) struct TeeStream {
    upstream: BoxStream<'static, reqwest::Result<Bytes>>,
    captured: Vec<u8>,
    ctx: Option<TurnCtx>,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    transcode: Option<(SseParser, Chain)>,
    ended: bool,
}

impl TeeStream {
    pub(super) fn new(
        upstream: BoxStream<'static, reqwest::Result<Bytes>>,
        idle_timeout: Duration,
        transcode: Option<Chain>,
        ctx: TurnCtx,
    ) -> Self {
        Self {
            upstream,
            captured: Vec::new(),
            ctx: Some(ctx),
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            idle_timeout,
            transcode: transcode.map(|chain| (SseParser::new(), chain)),
            ended: false,
        }
    }

    fn capture(&mut self) -> Capture {
        let bytes = std::mem::take(&mut self.captured);
        let format = self
            .ctx
            .as_ref()
            .map_or(ApiFormat::Openai, |c| c.proxy.upstream.format);
        capture::stream(format, bytes)
    }

    /// The client's bytes for an upstream chunk (`None`: nothing to send
    /// yet, the events are not complete).
    fn translate(&mut self, chunk: Bytes, last: bool) -> Option<Bytes> {
        let Some((parser, chain)) = self.transcode.as_mut() else {
            return Some(chunk);
        };
        let mut events = Vec::new();
        parser.push(&chunk, &mut |e| events.push(e));
        if last {
            parser.finish(&mut |e| events.push(e));
        }
        let mut out = Vec::new();
        for event in chain.run(events, last) {
            encode(&event, &mut out);
        }
        (!out.is_empty()).then(|| Bytes::from(out))
    }

    /// The stream ended: whole (`broke`: none), or broken off (the error's
    /// kind and message, also sent to the client as the stream's last
    /// event).
    fn end(&mut self, broke: Option<(&'static str, String)>) -> Option<Bytes> {
        self.ended = true;
        let capture = self.capture();
        let ctx = self.ctx.as_mut()?;
        let http_status = StatusCode::OK;
        let Some((kind, why)) = broke else {
            ctx.upstream_done = Some(Instant::now());
            ctx.finish(Outcome::Answered {
                http_status,
                capture,
            });
            return None;
        };
        ctx.proxy.metrics.errors.inc(&[kind]);
        let mut event = Vec::new();
        encode(&ctx.front.stream_error(kind, &why), &mut event);
        ctx.finish(Outcome::Incomplete {
            http_status: Some(http_status),
            capture,
            why,
        });
        Some(Bytes::from(event))
    }
}

impl Stream for TeeStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            let _in_turn = this.ctx.as_ref().map(|c| c.span.clone().entered());
            match this.upstream.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Some(ctx) = this.ctx.as_mut() {
                        ctx.first_byte.get_or_insert_with(Instant::now);
                    }
                    if this.captured.len() + chunk.len() <= CAPTURE_LIMIT {
                        this.captured.extend_from_slice(&chunk);
                    }
                    let deadline = tokio::time::Instant::now() + this.idle_timeout;
                    this.idle.as_mut().reset(deadline);
                    if let Some(out) = this.translate(chunk, false) {
                        return Poll::Ready(Some(Ok(out)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    let message = format!("the upstream stream failed: {e}");
                    return Poll::Ready(this.end(Some(("upstream_stream_error", message))).map(Ok));
                }
                Poll::Ready(None) => {
                    let tail = this.translate(Bytes::new(), true);
                    this.end(None);
                    return Poll::Ready(tail.map(Ok));
                }
                Poll::Pending => {
                    if this.idle.as_mut().poll(cx).is_ready() {
                        let message = format!(
                            "the upstream sent nothing for {} s (proxy.timeouts.between_chunks)",
                            this.idle_timeout.as_secs_f64()
                        );
                        return Poll::Ready(this.end(Some(("stream_stalled", message))).map(Ok));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Drop for TeeStream {
    /// Dropped before the end: the client disconnected. Dropping the
    /// upstream body (right after this) closes the upstream connection,
    /// which cancels the upstream request.
    fn drop(&mut self) {
        if !self.ended {
            let captured = self.capture();
            if let Some(mut ctx) = self.ctx.take() {
                ctx.proxy.metrics.errors.inc(&["client_disconnected"]);
                ctx.finish(Outcome::Incomplete {
                    http_status: Some(StatusCode::OK),
                    capture: captured,
                    why: "client disconnected".into(),
                });
            }
        }
    }
}
