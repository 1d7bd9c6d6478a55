//! `embedding`: hybrid skill retrieval. Dense similarity between the user's
//! message and each skill, over embeddings the host computes (the `embed`
//! capability; the host caches the library's vectors, so re-indexing is
//! cheap), fused with BM25 by reciprocal rank fusion.
//!
//! Why both: embeddings find a skill from a paraphrase that shares no word
//! with it ("my commits all say wip" → commit messages), BM25 finds exact
//! identifiers and text the embedding model does not read well (CJK with an
//! English-only model, error codes, tool names).
//!
//! A skill is embedded twice: what it is about (name, description, tags)
//! and how it starts (the first part of its body); its similarity is the
//! better of the two. The relevance returned is the stronger of the two
//! signals, each mapped onto [0, 1] so that the host's floors mean the same
//! as with `bm25` alone.

use std::cell::RefCell;

use metaclaw_bm25 as bm25;
use metaclaw_bm25::Index as Lexical;
use metaclaw_plugin_sdk::retriever::{
    Guest, LogLevel, Metadata, PluginGuest, ScoredSkill, Skill, TurnContext, embed, log, metadata,
};

/// Characters of the body that are embedded (the model reads ~256 tokens).
const BODY_CHARS: usize = 1000;
/// Texts per call to the host.
const BATCH: usize = 64;
/// Cosine similarity (all-MiniLM-L6-v2) mapped onto relevance: `FLOOR` is
/// 0 and `FLOOR + SPAN` is 1, so the host's default floor of 0.3 asks for a
/// cosine of 0.3 (unrelated texts sit below ~0.2).
const FLOOR: f32 = 0.15;
const SPAN: f32 = 0.50;
/// Reciprocal rank fusion's constant (the usual 60).
const RRF_K: f32 = 60.0;
/// The dense relevance at which a skill's meaning corroborates the words
/// BM25 found it by (a cosine of 0.2; unrelated texts sit below it).
const CORROBORATING: f32 = 0.1;
/// Candidates taken from each ranking before fusing.
const CANDIDATES: usize = 50;

/// The host's `embed`, or a stand-in in native tests.
pub type EmbedFn = dyn Fn(&[String]) -> Result<Vec<Vec<f32>>, String>;

#[derive(Default)]
pub struct Index {
    ids: Vec<String>,
    /// Dimensions of the host's embeddings.
    dim: usize,
    /// Per skill, its head's and its body's vector, quantised (see `lanes`).
    heads: Vec<Lane>,
    bodies: Vec<Lane>,
    head_scales: Vec<f32>,
    body_scales: Vec<f32>,
    lexical: Lexical,
}

thread_local! {
    static INDEX: RefCell<Index> = RefCell::new(Index::default());
}

pub struct Embedding;

impl PluginGuest for Embedding {
    fn metadata() -> Metadata {
        let mut m = metadata(
            "embedding",
            env!("CARGO_PKG_VERSION"),
            "Embeddings computed by the host, fused with BM25 (needs the embed grant)",
        );
        m.capabilities = vec!["embed".into()];
        m
    }
}

impl Guest for Embedding {
    fn index(skills: Vec<Skill>, _generation: u64) -> Result<(), String> {
        // Free the old index first: wasm memory never shrinks, so the peak
        // is what an instance keeps.
        INDEX.with(|i| *i.borrow_mut() = Index::default());
        let built = Index::build(&skills, &|texts| embed::embed(texts))?;
        drop(skills);
        INDEX.with(|i| *i.borrow_mut() = built);
        Ok(())
    }

    fn retrieve(context: TurnContext, k: u32) -> Vec<ScoredSkill> {
        let query = context.query.trim();
        if query.is_empty() || INDEX.with(|i| i.borrow().ids.is_empty()) {
            return Vec::new();
        }
        let vector = match embed::embed(&[query.to_string()]) {
            Ok(mut v) if v.len() == 1 => v.remove(0),
            Ok(_) => return Vec::new(),
            Err(e) => {
                // Nothing to rank with: the host sees the failed embedding
                // and asks the next retriever (BM25) instead.
                log(LogLevel::Debug, &format!("cannot embed the query: {e}"));
                return Vec::new();
            }
        };
        INDEX.with(|i| i.borrow().search(query, &vector, k as usize))
    }
}

#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::retriever::export_retriever!(Embedding);

/// The two texts embedded for a skill.
pub fn texts(skill: &Skill) -> (String, String) {
    let mut head = skill.name.replace(['-', '_'], " ");
    if !skill.description.is_empty() {
        head.push_str(": ");
        head.push_str(&skill.description);
    }
    if !skill.tags.is_empty() {
        head.push_str(" (");
        head.push_str(&skill.tags.join(", "));
        head.push(')');
    }
    let body: String = skill.body.chars().take(BODY_CHARS).collect();
    (head, body)
}

/// Vectors are stored as 8-bit integers with one scale each: a quarter of
/// the memory of `f32` (10,000 skills fit the default 64 MiB plugin budget
/// with room to spare) and a cosine within ~0.005 of the exact one. Dot
/// products run on 16 lanes at once with wasm SIMD (scripts/build-plugins
/// enables simd128); elsewhere (native tests) a plain loop does the same.
mod lanes {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub type Lane = core::arch::wasm32::v128;
    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    pub type Lane = [i8; 16];

    /// Lanes per vector of `dim` floats.
    pub fn per_vector(dim: usize) -> usize {
        dim.div_ceil(16)
    }

    /// Appends `v` quantised to `out`; returns its scale.
    pub fn push(v: &[f32], out: &mut Vec<Lane>) -> f32 {
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        for chunk in v.chunks(16) {
            let mut q = [0i8; 16];
            for (slot, x) in q.iter_mut().zip(chunk) {
                *slot = (x / scale).round().clamp(-127.0, 127.0) as i8;
            }
            out.push(lane(q));
        }
        scale
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn lane(q: [i8; 16]) -> Lane {
        core::arch::wasm32::i8x16(
            q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11], q[12], q[13],
            q[14], q[15],
        )
    }

    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    fn lane(q: [i8; 16]) -> Lane {
        q
    }

    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub fn dot(a: &[Lane], b: &[Lane]) -> i32 {
        use core::arch::wasm32::*;
        let mut acc = i32x4_splat(0);
        for (x, y) in a.iter().zip(b) {
            let lo = i32x4_extadd_pairwise_i16x8(i16x8_extmul_low_i8x16(*x, *y));
            let hi = i32x4_extadd_pairwise_i16x8(i16x8_extmul_high_i8x16(*x, *y));
            acc = i32x4_add(acc, i32x4_add(lo, hi));
        }
        i32x4_extract_lane::<0>(acc)
            + i32x4_extract_lane::<1>(acc)
            + i32x4_extract_lane::<2>(acc)
            + i32x4_extract_lane::<3>(acc)
    }

    #[cfg(not(all(target_arch = "wasm32", target_feature = "simd128")))]
    pub fn dot(a: &[Lane], b: &[Lane]) -> i32 {
        a.iter()
            .flatten()
            .zip(b.iter().flatten())
            .map(|(x, y)| *x as i32 * *y as i32)
            .sum()
    }
}

use lanes::Lane;

/// A cosine similarity as a relevance in [0, 1].
pub fn relevance(cosine: f32) -> f32 {
    ((cosine - FLOOR) / SPAN).clamp(0.0, 1.0)
}

/// The best `n` of `scores` as (score, position), best first.
fn top(scores: impl Iterator<Item = f32>, n: usize) -> Vec<(f32, usize)> {
    let mut best: Vec<(f32, usize)> = Vec::with_capacity(n + 1);
    if n == 0 {
        return best;
    }
    for (i, s) in scores.enumerate() {
        if best.len() == n && s <= best[n - 1].0 {
            continue;
        }
        let at = best.partition_point(|(t, _)| *t >= s);
        best.insert(at, (s, i));
        best.truncate(n);
    }
    best
}

impl Index {
    pub fn build(skills: &[Skill], embed: &EmbedFn) -> Result<Self, String> {
        let mut index = Index {
            lexical: Lexical::build(skills),
            ..Index::default()
        };
        for chunk in skills.chunks(BATCH / 2) {
            let mut batch = Vec::with_capacity(chunk.len() * 2);
            for skill in chunk {
                let (head, body) = texts(skill);
                batch.push(head);
                batch.push(body);
            }
            let vectors = embed(&batch)?;
            if vectors.len() != batch.len() {
                return Err(format!(
                    "the host returned {} embeddings for {} texts",
                    vectors.len(),
                    batch.len()
                ));
            }
            for (skill, pair) in chunk.iter().zip(vectors.chunks_exact(2)) {
                if index.dim == 0 {
                    index.dim = pair[0].len();
                    let lanes = skills.len() * lanes::per_vector(index.dim);
                    index.heads.reserve_exact(lanes);
                    index.bodies.reserve_exact(lanes);
                }
                if pair[0].len() != index.dim || pair[1].len() != index.dim || index.dim == 0 {
                    return Err("the host returned embeddings of different sizes".into());
                }
                index
                    .head_scales
                    .push(lanes::push(&pair[0], &mut index.heads));
                index
                    .body_scales
                    .push(lanes::push(&pair[1], &mut index.bodies));
                index.ids.push(skill.id.clone());
            }
        }
        Ok(index)
    }

    /// Dense similarity of every skill to `vector` (a unit vector): the
    /// better of its head's and its body's cosine.
    fn similarities(&self, vector: &[f32]) -> Vec<f32> {
        let width = lanes::per_vector(self.dim);
        let mut query = Vec::with_capacity(width);
        let scale = lanes::push(vector, &mut query);
        self.heads
            .chunks_exact(width)
            .zip(self.bodies.chunks_exact(width))
            .zip(self.head_scales.iter().zip(&self.body_scales))
            .map(|((h, b), (hs, bs))| {
                let head = lanes::dot(&query, h) as f32 * hs;
                let body = lanes::dot(&query, b) as f32 * bs;
                head.max(body) * scale
            })
            .collect()
    }

    /// The `k` skills best for `query` (text) and `vector` (its
    /// embedding), best first.
    pub fn search(&self, query: &str, vector: &[f32], k: usize) -> Vec<ScoredSkill> {
        if vector.len() != self.dim || k == 0 {
            return Vec::new();
        }
        let n = CANDIDATES.max(k);
        let similarity = self.similarities(vector);
        // Chat that shares a topic's everyday words ("keeping secrets from
        // my sister") is near that topic in meaning too: as with BM25 alone,
        // it keeps half its relevance.
        let chat = self.lexical.chat(query);
        let dense = |cosine: f32| {
            let r = relevance(cosine);
            if chat { r * bm25::UNCORROBORATED } else { r }
        };
        // (fused score, relevance) per skill that either ranking proposes.
        let mut fused: Vec<(usize, f32, f32)> = Vec::with_capacity(2 * n);
        for (rank, (cosine, doc)) in top(similarity.iter().copied(), n).into_iter().enumerate() {
            fused.push((doc, 1.0 / (RRF_K + rank as f32), dense(cosine)));
        }
        for (rank, hit) in self.lexical.hits(query, n).into_iter().enumerate() {
            let doc = hit.doc as usize;
            let rrf = 1.0 / (RRF_K + rank as f32);
            // Words BM25 found uncorroborated count fully when the skill is
            // also near the message in meaning.
            let lexical = if !chat && relevance(similarity[doc]) >= CORROBORATING {
                hit.evidence
            } else {
                hit.relevance
            };
            match fused.iter_mut().find(|(d, _, _)| *d == doc) {
                Some(entry) => {
                    entry.1 += rrf;
                    entry.2 = entry.2.max(lexical);
                }
                None => fused.push((doc, rrf, lexical.max(dense(similarity[doc])))),
            }
        }
        fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        fused.truncate(k);
        fused
            .into_iter()
            .map(|(doc, _, relevance)| ScoredSkill {
                id: self.ids[doc].clone(),
                score: relevance,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(id: &str, description: &str, body: &str) -> Skill {
        Skill {
            id: id.into(),
            name: id.into(),
            description: description.into(),
            category: "general".into(),
            tags: vec!["t".into()],
            version: "1.0.0".into(),
            body: body.into(),
        }
    }

    /// A bag-of-letters embedder: texts sharing letters are similar.
    fn letters(texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; 26];
                for c in t.bytes().filter(u8::is_ascii_lowercase) {
                    v[(c - b'a') as usize] += 1.0;
                }
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter_mut().for_each(|x| *x /= norm.max(1e-9));
                v
            })
            .collect())
    }

    fn vector(text: &str) -> Vec<f32> {
        letters(&[text.to_string()]).unwrap().remove(0)
    }

    #[test]
    fn dense_similarity_ranks_without_shared_words() {
        let skills = [
            skill("aaa", "aaaa", "aaaa"),
            skill("zzz", "zzzz", "zzzz"),
            skill("mmm", "mmmm", "mmmm"),
        ];
        let index = Index::build(&skills, &letters).unwrap();
        // "zzzzzz" is no word of any skill: only the embedding finds it.
        let hits = index.search("zzzzzz", &vector("zzzzzz"), 2);
        assert_eq!(hits[0].id, "zzz");
        assert_eq!(hits[0].score, 1.0);
        assert!(hits.len() == 2 && hits[1].score < 0.3, "{hits:?}");
        assert!(index.search("zz", &vector("zz"), 0).is_empty());
        assert!(
            index.search("zz", &[1.0, 0.0], 3).is_empty(),
            "wrong dimension"
        );
    }

    #[test]
    fn words_the_model_cannot_read_are_found_by_bm25() {
        let skills = [
            skill(
                "git-commits",
                "Write commit messages",
                "Subject line first.",
            ),
            skill("csv-files", "Process CSV files", "Check the delimiter."),
        ];
        // An embedder that sees nothing in any text.
        let blind = |texts: &[String]| -> Result<Vec<Vec<f32>>, String> {
            Ok(texts.iter().map(|_| vec![1.0, 0.0]).collect())
        };
        let index = Index::build(&skills, &blind).unwrap();
        let hits = index.search("the delimiter of my CSV", &[0.0, 1.0], 2);
        assert_eq!(hits[0].id, "csv-files");
        assert!(hits[0].score >= 0.3, "{hits:?}");
    }

    #[test]
    fn many_skills_cross_batches() {
        let skills: Vec<Skill> = (0..100)
            .map(|i| skill(&format!("s{i}"), &"ab".repeat(i + 1), "c"))
            .collect();
        let index = Index::build(&skills, &letters).unwrap();
        assert_eq!(index.ids.len(), 100);
        assert_eq!(index.heads.len(), 100 * lanes::per_vector(26));
        assert_eq!(index.search("ab", &vector("ab"), 7).len(), 7);
    }

    #[test]
    fn host_errors_and_miscounts_fail_the_index() {
        let failing = |_: &[String]| -> Result<Vec<Vec<f32>>, String> { Err("down".into()) };
        assert_eq!(
            Index::build(&[skill("a", "b", "c")], &failing).err(),
            Some("down".into())
        );
        let short = |_: &[String]| -> Result<Vec<Vec<f32>>, String> { Ok(vec![vec![1.0]]) };
        assert!(Index::build(&[skill("a", "b", "c")], &short).is_err());
    }

    #[test]
    fn relevance_maps_cosines_onto_zero_one() {
        assert_eq!(relevance(0.0), 0.0);
        assert_eq!(relevance(FLOOR), 0.0);
        assert_eq!(relevance(1.0), 1.0);
        assert!((relevance(0.30) - 0.3).abs() < 1e-6);
    }

    #[test]
    fn top_keeps_the_best_in_order() {
        let t = top([0.1, 0.9, 0.5, 0.7, 0.2].into_iter(), 3);
        assert_eq!(t, vec![(0.9, 1), (0.7, 3), (0.5, 2)]);
        assert!(top([1.0].into_iter(), 0).is_empty());
    }

    #[test]
    fn quantised_cosines_stay_close_to_exact_ones() {
        // Two unit vectors of 384 dimensions, of the kind a model produces.
        let make = |seed: u32| -> Vec<f32> {
            let mut v: Vec<f32> = (0..384u32)
                .map(|i| (((i + 1) * seed) % 97) as f32 / 97.0 - 0.5)
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            v
        };
        let (a, b) = (make(31), make(37));
        let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let (mut qa, mut qb) = (Vec::new(), Vec::new());
        let (sa, sb) = (lanes::push(&a, &mut qa), lanes::push(&b, &mut qb));
        let approx = lanes::dot(&qa, &qb) as f32 * sa * sb;
        assert!((exact - approx).abs() < 0.005, "{exact} vs {approx}");
        let own = lanes::dot(&qa, &qa) as f32 * sa * sa;
        assert!((own - 1.0).abs() < 0.005, "{own}");
        // Dimensions that are not a multiple of 16 are padded with zeros.
        let mut q = Vec::new();
        lanes::push(&[1.0, 0.0, 0.0], &mut q);
        assert_eq!(q.len(), 1);
    }
}
