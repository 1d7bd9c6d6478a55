//! The fake's "model": a bigram table over a small vocabulary. The base
//! logits are fixed by a seed; a LoRA is a delta table that starts at zero,
//! so sampling from trained weights gives other logprobs than the base.
//! Training is real gradient descent on the losses the reference names
//! (summed over tokens, as the servers do), so a test can check that a
//! step moves the logprobs the way the advantages say. Its "tokenizer"
//! spells each token as one character, so stop strings mean something.

use metaclaw_tinker::types::{Datum, LossFn, Sequence, Stop, StopReason};

/// Per datum: the current logprob of each target, and each one's loss.
pub type Outputs = (Vec<f32>, Vec<f32>);

/// Token ids are taken modulo this.
pub const VOCAB: usize = 64;

/// Weights: base logits and the trained delta, row = previous token.
#[derive(Clone, Debug, PartialEq)]
pub struct Weights {
    pub delta: Vec<f32>,
}

impl Default for Weights {
    fn default() -> Self {
        Self {
            delta: vec![0.0; VOCAB * VOCAB],
        }
    }
}

/// The character each token id spells (ids taken modulo [`VOCAB`]).
const SPELLING: &[u8; VOCAB] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";

/// The text of `tokens`: one character per token, so a test can build a
/// stop string from tokens it saw sampled.
pub fn detokenize(tokens: &[i32]) -> String {
    tokens
        .iter()
        .map(|&t| char::from(SPELLING[token(i64::from(t))]))
        .collect()
}

fn base_logit(prev: usize, next: usize) -> f32 {
    // A fixed, uneven table: every row prefers a few tokens.
    let h = (prev as u64 * 0x9E37_79B9 + next as u64 * 0x85EB_CA6B) % 1000;
    (h as f32) / 250.0
}

fn token(t: i64) -> usize {
    (t.rem_euclid(VOCAB as i64)) as usize
}

impl Weights {
    /// log p(next | prev) for every next.
    fn row_logprobs(&self, prev: usize) -> Vec<f32> {
        let logits: Vec<f32> = (0..VOCAB)
            .map(|n| base_logit(prev, n) + self.delta[prev * VOCAB + n])
            .collect();
        let max = logits.iter().copied().fold(f32::MIN, f32::max);
        let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
        let log_z = max + sum.ln();
        logits.into_iter().map(|l| l - log_z).collect()
    }

    /// Samples `max_tokens` after `prompt` (deterministic for a seed),
    /// stopping at a stop token, or once the sampled text holds a stop
    /// string (the tokens that completed it are kept, as servers do).
    pub fn sample(
        &self,
        prompt: &[i32],
        max_tokens: usize,
        temperature: f32,
        stop: &Stop,
        seed: u64,
    ) -> Sequence {
        let mut rng = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
        let mut prev = i64::from(prompt.last().copied().unwrap_or(0));
        let (mut tokens, mut logprobs) = (Vec::new(), Vec::new());
        let mut stop_reason = StopReason::Length;
        for _ in 0..max_tokens {
            let row = self.row_logprobs(token(prev));
            let next = if temperature <= 0.0 {
                argmax(&row)
            } else {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let u = (rng >> 11) as f64 / (1u64 << 53) as f64;
                pick(&row, temperature, u)
            };
            tokens.push(next as i32);
            logprobs.push(row[next]);
            prev = next as i64;
            let stopped = match stop {
                Stop::Tokens(ids) => ids.contains(&(next as i32)),
                Stop::Strings(texts) => {
                    let text = detokenize(&tokens);
                    texts
                        .iter()
                        .any(|s| !s.is_empty() && text.contains(s.as_str()))
                }
            };
            if stopped {
                stop_reason = StopReason::Stop;
                break;
            }
        }
        Sequence {
            stop_reason,
            tokens,
            logprobs: Some(logprobs),
        }
    }

    /// The logprob of each of `tokens` sampled after `prompt` (a scripted
    /// sample's logprobs: what these weights give them).
    pub fn score(&self, prompt: &[i32], tokens: &[i32]) -> Vec<f32> {
        let mut prev = i64::from(prompt.last().copied().unwrap_or(0));
        tokens
            .iter()
            .map(|&t| {
                let row = self.row_logprobs(token(prev));
                prev = i64::from(t);
                row[token(i64::from(t))]
            })
            .collect()
    }

    /// The logprob of each prompt token given the one before; the first
    /// has none.
    pub fn prompt_logprobs(&self, prompt: &[i32]) -> Vec<Option<f32>> {
        let mut out = Vec::with_capacity(prompt.len());
        out.extend(prompt.first().map(|_| None));
        for pair in prompt.windows(2) {
            let row = self.row_logprobs(token(i64::from(pair[0])));
            out.push(Some(row[token(i64::from(pair[1]))]));
        }
        out
    }

    /// Forward (and backward into `grad`): per datum the current logprob
    /// of each target and its loss. Position *i* of the input predicts
    /// `target_tokens[i]`.
    pub fn forward_backward(
        &self,
        data: &[Datum],
        loss: LossFn,
        grad: Option<&mut Vec<f32>>,
    ) -> Result<Vec<Outputs>, String> {
        let mut grad = grad;
        let mut out = Vec::with_capacity(data.len());
        for (d, datum) in data.iter().enumerate() {
            let input: Vec<i64> = datum
                .model_input
                .chunks
                .iter()
                .flat_map(|c| match c {
                    metaclaw_tinker::types::Chunk::EncodedText { tokens } => {
                        tokens.iter().map(|&t| i64::from(t)).collect::<Vec<_>>()
                    }
                })
                .collect();
            let input_of = |name: &str| datum.loss_fn_inputs.get(name).map(|t| t.floats());
            let targets = input_of("target_tokens")
                .ok_or_else(|| format!("datum {d}: `target_tokens` is required"))?;
            if targets.len() != input.len() {
                return Err(format!(
                    "datum {d}: target_tokens has {} values for {} input tokens",
                    targets.len(),
                    input.len()
                ));
            }
            let ones = vec![1.0; input.len()];
            let (weights, sampled, advantages) = match loss {
                LossFn::CrossEntropy => (input_of("weights").unwrap_or(ones.clone()), None, None),
                _ => (
                    input_of("weights").unwrap_or(ones.clone()),
                    Some(input_of("logprobs").ok_or_else(|| {
                        format!("datum {d}: `logprobs` is required for {}", loss.as_str())
                    })?),
                    Some(input_of("advantages").ok_or_else(|| {
                        format!("datum {d}: `advantages` is required for {}", loss.as_str())
                    })?),
                ),
            };
            let (mut logprobs, mut losses) = (Vec::new(), Vec::new());
            for (i, (&prev, &target)) in input.iter().zip(&targets).enumerate() {
                let (p, t) = (token(prev), token(target as i64));
                let row = self.row_logprobs(p);
                let lp = row[t];
                let w = weights.get(i).copied().unwrap_or(1.0);
                // d(loss)/d(logp of the target), per loss.
                let (value, dlp) = match (loss, &sampled, &advantages) {
                    (LossFn::CrossEntropy, _, _) => (-w * lp, -w),
                    (_, Some(q), Some(a)) => {
                        let (q, a) = (q[i], a[i]);
                        let r = (lp - q).exp();
                        (-w * r * a, -w * r * a)
                    }
                    _ => (0.0, 0.0),
                };
                logprobs.push(lp);
                losses.push(value);
                if let Some(g) = grad.as_deref_mut() {
                    // d logp(t) / d logit(n) = [n == t] - p(n)
                    for (n, lpn) in row.iter().enumerate() {
                        let indicator = if n == t { 1.0 } else { 0.0 };
                        g[p * VOCAB + n] += dlp * (indicator - lpn.exp());
                    }
                }
            }
            out.push((logprobs, losses));
        }
        Ok(out)
    }

    /// One optimiser step (plain gradient descent; the Adam settings the
    /// client sends are accepted, only `learning_rate` is used); returns
    /// the gradient's norm and clears it.
    pub fn step(&mut self, grad: &mut [f32], learning_rate: f32) -> f32 {
        let norm = grad.iter().map(|g| g * g).sum::<f32>().sqrt();
        for (w, g) in self.delta.iter_mut().zip(grad.iter_mut()) {
            *w -= learning_rate * *g;
            *g = 0.0;
        }
        norm
    }
}

fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold(
            (0, f32::MIN),
            |best, (i, &v)| if v > best.1 { (i, v) } else { best },
        )
        .0
}

fn pick(row: &[f32], temperature: f32, u: f64) -> usize {
    let scaled: Vec<f64> = row
        .iter()
        .map(|lp| f64::from(lp / temperature).exp())
        .collect();
    let total: f64 = scaled.iter().sum();
    let mut acc = 0.0;
    for (i, p) in scaled.iter().enumerate() {
        acc += p / total;
        if u < acc {
            return i;
        }
    }
    row.len() - 1
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_positive_advantage_raises_the_sampled_tokens_logprob() {
        let mut weights = Weights::default();
        let seq = weights.sample(&[3], 4, 1.0, &NO_STOP, 7);
        let n = seq.tokens.len();
        let datum = Datum::from_sample(&[3], &seq, 1.0);
        let mut grad = vec![0.0; VOCAB * VOCAB];
        let before = weights
            .forward_backward(
                std::slice::from_ref(&datum),
                LossFn::ImportanceSampling,
                Some(&mut grad),
            )
            .unwrap();
        // On-policy: the ratio is 1, the loss is -Σ A.
        assert!((before[0].1.iter().sum::<f32>() + n as f32).abs() < 1e-4);
        let norm = weights.step(&mut grad, 0.5);
        assert!(norm > 0.0);
        let after = weights
            .forward_backward(&[datum], LossFn::ImportanceSampling, None)
            .unwrap();
        for (b, a) in before[0].0.iter().zip(&after[0].0) {
            assert!(a > b, "logprob {b} -> {a}");
        }
    }

    const NO_STOP: Stop = Stop::Tokens(Vec::new());

    #[test]
    fn sampling_is_deterministic_for_a_seed() {
        let weights = Weights::default();
        assert_eq!(
            weights.sample(&[1], 8, 1.0, &NO_STOP, 3),
            weights.sample(&[1], 8, 1.0, &NO_STOP, 3)
        );
        let greedy = weights.sample(&[1], 3, 0.0, &NO_STOP, 0);
        assert_eq!(greedy.tokens.len(), 3);
        let first = Stop::Tokens(vec![greedy.tokens[0]]);
        let stopped = weights.sample(&[1], 8, 0.0, &first, 0);
        assert_eq!(stopped.tokens.len(), 1);
        assert_eq!(stopped.stop_reason, StopReason::Stop);
    }

    #[test]
    fn stop_strings_match_the_sampled_text() {
        let weights = Weights::default();
        let greedy = weights.sample(&[1], 6, 0.0, &NO_STOP, 0);
        let text = detokenize(&greedy.tokens);
        // The text of tokens 2 and 3: sampling stops once token 3 is out.
        let stop = Stop::Strings(vec!["never".into(), text[1..3].to_string()]);
        let stopped = weights.sample(&[1], 6, 0.0, &stop, 0);
        assert_eq!(stopped.tokens, greedy.tokens[..3]);
        assert_eq!(stopped.stop_reason, StopReason::Stop);
    }

    #[test]
    fn prompt_logprobs_are_the_sampled_tokens_logprobs() {
        let weights = Weights::default();
        let seq = weights.sample(&[5], 4, 1.0, &NO_STOP, 9);
        let prompt: Vec<i32> = [5].iter().chain(&seq.tokens).copied().collect();
        let scored = weights.prompt_logprobs(&prompt);
        assert_eq!(scored[0], None);
        let sampled: Vec<Option<f32>> = seq.logprobs.unwrap().into_iter().map(Some).collect();
        assert_eq!(scored[1..], sampled[..]);
        assert!(weights.prompt_logprobs(&[]).is_empty());
    }
}
