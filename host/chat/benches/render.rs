//! What serving from the student adds to a turn's CPU, besides the sample
//! itself: rendering the request to tokens (messages normalised, chat
//! template, tokenizer) and parsing the sampled answer, for OpenClaw's
//! real first-turn request (60 KB, 12 tools) with the tiny Qwen3's
//! tokenizer and template. Baseline in the same run: reading the same body
//! as JSON once (`serde_json`), which every turn already does.
//!
//!     cargo bench -p metaclaw-chat --bench render
//!     ... -- --quick      # a short run that proves it works
//!     ... -- --model DIR  # another model's tokenizer and template files
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use metaclaw_chat::parse::{self, Family};
use metaclaw_chat::render::{ModelFiles, RenderOptions, Renderer};
use serde_json::Value;

/// The median of `rounds` rounds of `iters` calls, in microseconds a call.
fn time(rounds: usize, iters: usize, mut f: impl FnMut()) -> f64 {
    let mut per_call: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed().as_secs_f64() * 1e6 / iters as f64
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[per_call.len() / 2]
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, iters) = if quick { (3, 3) } else { (15, 40) };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let args: Vec<String> = std::env::args().collect();
    let model = args
        .iter()
        .position(|a| a == "--model")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| root.join("tests/fixtures/tiny-qwen3"), Into::into);
    let renderer = Renderer::new(&ModelFiles::from_dir(&model).unwrap()).unwrap();
    let capture =
        std::fs::read(root.join("tests/fixtures/openclaw/chat_completions_stream_request.json"))
            .unwrap();
    let capture: Value = serde_json::from_slice(&capture).unwrap();
    let body = serde_json::to_vec(&capture["body"]).unwrap();
    let options = RenderOptions {
        add_generation_prompt: true,
        enable_thinking: None,
    };
    let answer = "<think>\nThe user wants the file.\n</think>\n\nLet me read it.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"notes.txt\"}}\n</tool_call>";

    let json = time(rounds, iters, || {
        black_box(serde_json::from_slice::<Value>(black_box(&body)).unwrap());
    });
    let parsed: Value = serde_json::from_slice(&body).unwrap();
    let messages = parsed["messages"].as_array().unwrap();
    let tools = parsed["tools"].as_array().unwrap();
    let mut tokens = 0;
    let render = time(rounds, iters, || {
        let rendered = renderer.render(messages, Some(tools), &options).unwrap();
        tokens = rendered.tokens.len();
        black_box(rendered);
    });
    let text = renderer
        .render(messages, Some(tools), &options)
        .unwrap()
        .text;
    let encode = time(rounds, iters, || {
        black_box(renderer.encode(black_box(&text)).unwrap());
    });
    let parse = time(rounds, iters * 10, || {
        black_box(parse::parse(black_box(answer), Some(Family::Hermes), false));
    });
    println!(
        "OpenClaw first-turn request: {} bytes, {} messages, {} tools, {tokens} prompt tokens",
        body.len(),
        messages.len(),
        tools.len()
    );
    println!("| step | µs per call (median of {rounds} rounds of {iters}) | × JSON read |");
    println!("|---|---|---|");
    println!("| read the body as JSON (baseline) | {json:.0} | 1.00× |");
    println!(
        "| render: normalise, chat template, tokenize | {render:.0} | {:.2}× |",
        render / json
    );
    println!(
        "| of which: tokenize the rendered text | {encode:.0} | {:.2}× |",
        encode / json
    );
    println!(
        "| parse an answer with reasoning and a tool call | {parse:.1} | {:.3}× |",
        parse / json
    );
}
