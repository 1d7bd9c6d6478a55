//! The embedding cache: vectors of indexed texts in the store (by model and
//! content hash) and in memory; recent queries in memory only.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::store::sql::{Conn, Optional, params};
use anyhow::Result;
use sha2::{Digest, Sha256};

use super::{Backend, EmbedError};
use crate::http::Backoff;
use crate::plugins::{EmbedFailed, EmbedPurpose, Embedder, Spend, Unmetered};

type Key = [u8; 32];

/// Indexed vectors kept in memory (each instance of a retriever indexes the
/// same library): about 1.5 KB each at 384 dimensions.
const INDEXED_IN_MEMORY: usize = 50_000;
const QUERIES_IN_MEMORY: usize = 512;
/// Texts per backend call: bounds the memory of one forward pass.
const BATCH: usize = 32;
/// Rows unused this long are dropped when the cache opens.
const KEEP_UNUSED_MS: i64 = 30 * 24 * 3600 * 1000;
/// A hit refreshes a row's `used_ms` at most this often.
const TOUCH_EVERY_MS: i64 = 24 * 3600 * 1000;
/// After the backend fails, calls fail at once for 5 s, doubling up to
/// 5 min, or for as long as the server's `Retry-After` asks: a down or
/// rate-limited endpoint costs each turn nothing (retrieval falls back to
/// BM25 without waiting on it) and is not asked again too soon.
const BACKOFF: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(300));

pub struct Cached {
    backend: Arc<dyn Backend>,
    /// `None` when the store cannot be opened: embeddings still work, they
    /// are just not kept across restarts.
    db: Mutex<Option<Conn>>,
    indexed: Mutex<HashMap<Key, Arc<[f32]>>>,
    queries: Mutex<Fifo>,
    breaker: Mutex<Breaker>,
}

struct Breaker {
    /// No backend call before this.
    retry_at: Option<Instant>,
    /// The waits after failures in a row.
    backoff: Backoff,
    /// How long the last failure waits.
    wait: Duration,
    last_error: String,
}

impl Default for Breaker {
    fn default() -> Self {
        Self {
            retry_at: None,
            backoff: BACKOFF,
            wait: Duration::ZERO,
            last_error: String::new(),
        }
    }
}

#[derive(Default)]
struct Fifo {
    map: HashMap<Key, Arc<[f32]>>,
    order: VecDeque<Key>,
}

impl Cached {
    pub fn new(backend: Arc<dyn Backend>, db: &crate::store::Db) -> Result<Self> {
        let conn = match db.side_writer() {
            Ok(conn) => {
                let cutoff = crate::clock::now_ms() - KEEP_UNUSED_MS;
                if let Err(e) = conn.execute("DELETE FROM embeddings WHERE used_ms < ?1", [cutoff])
                {
                    tracing::warn!("cannot prune the embedding cache: {e}");
                }
                Some(conn)
            }
            Err(e) => {
                tracing::warn!("embeddings will not be cached across restarts: {e:#}");
                None
            }
        };
        Ok(Self {
            backend,
            db: Mutex::new(conn),
            indexed: Mutex::new(HashMap::new()),
            queries: Mutex::new(Fifo::default()),
            breaker: Mutex::new(Breaker::default()),
        })
    }

    pub fn model_id(&self) -> &str {
        self.backend.model_id()
    }

    fn key(&self, text: &str) -> Key {
        let mut h = Sha256::new();
        h.update(self.backend.model_id().as_bytes());
        h.update([0u8]);
        h.update(text.as_bytes());
        h.finalize().into()
    }

    /// Embeds what no cache has, unless the backend failed recently or
    /// `spend` does not allow it (charged before the first request).
    fn compute(&self, texts: &[&String], spend: &dyn Spend) -> Result<Vec<Vec<f32>>, EmbedFailed> {
        if let Ok(b) = self.breaker.lock()
            && let Some(at) = b.retry_at
        {
            let now = Instant::now();
            if now < at {
                return Err(EmbedFailed::Resting {
                    last: b.last_error.clone(),
                    secs: (at - now).as_secs() + 1,
                });
            }
        }
        let requests = texts.len().div_ceil(BATCH) as u64;
        spend.charge(requests, texts.iter().map(|t| t.len() as u64).sum())?;
        let outcome = self.compute_now(texts);
        if let Ok(mut b) = self.breaker.lock() {
            match &outcome {
                Ok(_) => *b = Breaker::default(),
                Err(e) => {
                    let wait = b.backoff.wait(e.retry_after);
                    tracing::warn!(
                        "the embedding backend failed; retrying in {:.0?}: {e}",
                        wait
                    );
                    b.retry_at = Some(Instant::now() + wait);
                    b.wait = wait;
                    b.last_error = e.message.clone();
                }
            }
        }
        Ok(outcome?)
    }

    /// `BATCH` texts per backend call.
    fn compute_now(&self, texts: &[&String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(BATCH) {
            let owned: Vec<String> = chunk.iter().map(|t| (*t).clone()).collect();
            let vectors = self.backend.embed(&owned)?;
            if vectors.len() != owned.len() {
                return Err(format!(
                    "the embedding backend returned {} vectors for {} texts",
                    vectors.len(),
                    owned.len()
                )
                .into());
            }
            out.extend(vectors);
        }
        if let Some(dim) = out.first().map(Vec::len)
            && out.iter().any(|v| v.len() != dim)
        {
            return Err("the embedding backend returned vectors of different sizes".into());
        }
        Ok(out)
    }

    fn embed_indexed(
        &self,
        texts: &[String],
        spend: &dyn Spend,
    ) -> Result<Vec<Vec<f32>>, EmbedFailed> {
        let keys: Vec<Key> = texts.iter().map(|t| self.key(t)).collect();
        let mut found: Vec<Option<Arc<[f32]>>> = match self.indexed.lock() {
            Ok(mem) => keys.iter().map(|k| mem.get(k).cloned()).collect(),
            Err(_) => vec![None; keys.len()],
        };
        let now = crate::clock::now_ms();
        if found.iter().any(Option::is_none)
            && let Ok(mut db) = self.db.lock()
            && let Some(conn) = db.as_mut()
            && let Err(e) = load(conn, &keys, &mut found, now)
        {
            tracing::warn!("cannot read the embedding cache: {e}");
        }
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| found[i].is_none()).collect();
        if !missing.is_empty() {
            let fresh = self.compute(
                &missing.iter().map(|&i| &texts[i]).collect::<Vec<_>>(),
                spend,
            )?;
            let rows: Vec<(Key, Arc<[f32]>)> = missing
                .iter()
                .zip(fresh)
                .map(|(&i, v)| (keys[i], Arc::<[f32]>::from(v)))
                .collect();
            if let Ok(mut db) = self.db.lock()
                && let Some(conn) = db.as_mut()
                && let Err(e) = save(conn, self.backend.model_id(), &rows, now)
            {
                tracing::warn!("cannot write the embedding cache: {e}");
            }
            for (&i, (_, v)) in missing.iter().zip(&rows) {
                found[i] = Some(v.clone());
            }
        }
        if let Ok(mut mem) = self.indexed.lock() {
            if mem.len() + texts.len() > INDEXED_IN_MEMORY {
                mem.clear();
            }
            for (k, v) in keys.iter().zip(&found) {
                if let Some(v) = v {
                    mem.insert(*k, v.clone());
                }
            }
        }
        Ok(found
            .into_iter()
            .map(|v| v.map(|v| v.to_vec()).unwrap_or_default())
            .collect())
    }

    fn embed_queries(
        &self,
        texts: &[String],
        spend: &dyn Spend,
    ) -> Result<Vec<Vec<f32>>, EmbedFailed> {
        let keys: Vec<Key> = texts.iter().map(|t| self.key(t)).collect();
        let mut found: Vec<Option<Arc<[f32]>>> = match self.queries.lock() {
            Ok(q) => keys.iter().map(|k| q.map.get(k).cloned()).collect(),
            Err(_) => vec![None; keys.len()],
        };
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| found[i].is_none()).collect();
        if !missing.is_empty() {
            let fresh = self.compute(
                &missing.iter().map(|&i| &texts[i]).collect::<Vec<_>>(),
                spend,
            )?;
            let mut q = self.queries.lock().ok();
            for (&i, v) in missing.iter().zip(fresh) {
                let v: Arc<[f32]> = v.into();
                if let Some(q) = q.as_mut()
                    && q.map.insert(keys[i], v.clone()).is_none()
                {
                    q.order.push_back(keys[i]);
                    while q.order.len() > QUERIES_IN_MEMORY {
                        if let Some(old) = q.order.pop_front() {
                            q.map.remove(&old);
                        }
                    }
                }
                found[i] = Some(v);
            }
        }
        Ok(found
            .into_iter()
            .map(|v| v.map(|v| v.to_vec()).unwrap_or_default())
            .collect())
    }
}

/// Shared by every plugin: a vector depends only on the model and the
/// text, so a library re-indexed by another instance, another load of the
/// file or another retriever costs no request; only what goes upstream is
/// charged to the plugin asking.
impl Embedder for Cached {
    fn embed(&self, texts: &[String], purpose: EmbedPurpose) -> Result<Vec<Vec<f32>>, EmbedFailed> {
        self.embed_within(texts, purpose, &Unmetered)
    }

    fn embed_within(
        &self,
        texts: &[String],
        purpose: EmbedPurpose,
        spend: &dyn Spend,
    ) -> Result<Vec<Vec<f32>>, EmbedFailed> {
        match purpose {
            EmbedPurpose::Index => self.embed_indexed(texts, spend),
            EmbedPurpose::Query => self.embed_queries(texts, spend),
        }
    }
}

fn load(
    conn: &mut Conn,
    keys: &[Key],
    found: &mut [Option<Arc<[f32]>>],
    now: i64,
) -> crate::store::sql::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut get = tx.prepare_cached("SELECT vector, used_ms FROM embeddings WHERE key = ?1")?;
        let mut touch = tx.prepare_cached("UPDATE embeddings SET used_ms = ?2 WHERE key = ?1")?;
        for (key, slot) in keys.iter().zip(found.iter_mut()) {
            if slot.is_some() {
                continue;
            }
            let row: Option<(Vec<u8>, i64)> = get
                .query_row([&key[..]], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some((bytes, used)) = row {
                *slot = Some(from_bytes(&bytes).into());
                if now - used > TOUCH_EVERY_MS {
                    touch.execute(params![&key[..], now])?;
                }
            }
        }
    }
    tx.commit()
}

fn save(
    conn: &mut Conn,
    model: &str,
    rows: &[(Key, Arc<[f32]>)],
    now: i64,
) -> crate::store::sql::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut put = tx.prepare_cached(
            "INSERT INTO embeddings (key, model, dim, vector, used_ms) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (key) DO UPDATE SET model = excluded.model, dim = excluded.dim,
                 vector = excluded.vector, used_ms = excluded.used_ms",
        )?;
        for (key, v) in rows {
            put.execute(params![&key[..], model, v.len() as i64, to_bytes(v), now])?;
        }
    }
    tx.commit()
}

fn to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts the texts it is asked to embed.
    struct Counting(AtomicUsize);

    impl Backend for Counting {
        fn model_id(&self) -> &str {
            "counting-v1"
        }
        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.0.fetch_add(texts.len(), Ordering::SeqCst);
            Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
        }
    }

    fn texts(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn indexed_texts_are_embedded_once_even_across_restarts() {
        let tmp = tempfile::tempdir().unwrap();
        let db = crate::store::test_db(tmp.path().join("metaclaw.db"));
        let backend = Arc::new(Counting(AtomicUsize::new(0)));
        let first = Cached::new(backend.clone(), &db).unwrap();
        let v = first
            .embed(&texts(&["alpha", "beta"]), EmbedPurpose::Index)
            .unwrap();
        assert_eq!(v, vec![vec![5.0, 1.0], vec![4.0, 1.0]]);
        first
            .embed(&texts(&["alpha", "gamma!"]), EmbedPurpose::Index)
            .unwrap();
        assert_eq!(backend.0.load(Ordering::SeqCst), 3);
        drop(first);

        // A new process: the store still has them.
        let second = Cached::new(backend.clone(), &db).unwrap();
        let v = second
            .embed(&texts(&["gamma!", "alpha", "beta"]), EmbedPurpose::Index)
            .unwrap();
        assert_eq!(v[0], vec![6.0, 1.0]);
        assert_eq!(backend.0.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_failing_backend_is_not_asked_again_until_its_backoff_ends() {
        struct Down(AtomicUsize);
        impl Backend for Down {
            fn model_id(&self) -> &str {
                "down-v1"
            }
            fn embed(&self, _: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
                self.0.fetch_add(1, Ordering::SeqCst);
                Err("connection refused".into())
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let backend = Arc::new(Down(AtomicUsize::new(0)));
        let cache = Cached::new(
            backend.clone(),
            &crate::store::test_db(tmp.path().join("metaclaw.db")),
        )
        .unwrap();
        let first = cache
            .embed(&texts(&["a"]), EmbedPurpose::Query)
            .unwrap_err()
            .to_string();
        assert!(first.contains("connection refused"), "{first}");
        for _ in 0..5 {
            let again = cache
                .embed(&texts(&["b"]), EmbedPurpose::Index)
                .unwrap_err();
            assert!(matches!(again, EmbedFailed::Resting { .. }), "{again}");
            let again = again.to_string();
            assert!(again.contains("connection refused") && again.contains("not retried"));
        }
        assert_eq!(
            backend.0.load(Ordering::SeqCst),
            1,
            "one call, then fail fast"
        );
        // Once the wait is over it is tried again, and a new failure waits longer.
        if let Ok(mut b) = cache.breaker.lock() {
            b.retry_at = Some(Instant::now() - Duration::from_millis(1));
        }
        cache
            .embed(&texts(&["c"]), EmbedPurpose::Query)
            .unwrap_err();
        assert_eq!(
            backend.0.load(Ordering::SeqCst),
            2,
            "retried after the wait"
        );
        assert_eq!(
            cache.breaker.lock().unwrap().wait,
            Duration::from_secs(10),
            "5 s, then 10"
        );
    }

    #[test]
    fn a_rate_limited_backend_is_left_alone_as_long_as_it_asks() {
        struct Limited;
        impl Backend for Limited {
            fn model_id(&self) -> &str {
                "limited-v1"
            }
            fn embed(&self, _: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
                Err(EmbedError {
                    message: "answered 429 Too Many Requests".into(),
                    retry_after: Some(Duration::from_secs(60)),
                })
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cached::new(
            Arc::new(Limited),
            &crate::store::test_db(tmp.path().join("metaclaw.db")),
        )
        .unwrap();
        let e = cache
            .embed(&texts(&["a"]), EmbedPurpose::Query)
            .unwrap_err()
            .to_string();
        assert!(e.contains("429"), "{e}");
        assert_eq!(
            cache.breaker.lock().unwrap().wait,
            Duration::from_secs(60),
            "not the 5 s of the backoff"
        );
    }

    #[test]
    fn queries_stay_in_memory_and_models_never_mix() {
        let tmp = tempfile::tempdir().unwrap();
        let db = crate::store::test_db(tmp.path().join("metaclaw.db"));
        let backend = Arc::new(Counting(AtomicUsize::new(0)));
        let cache = Cached::new(backend.clone(), &db).unwrap();
        cache
            .embed(&texts(&["how do I rebase"]), EmbedPurpose::Query)
            .unwrap();
        cache
            .embed(&texts(&["how do I rebase"]), EmbedPurpose::Query)
            .unwrap();
        assert_eq!(backend.0.load(Ordering::SeqCst), 1);
        let conn = db.side_writer().unwrap();
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM embeddings", (), |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0, "queries are not written to the store");

        struct Other;
        impl Backend for Other {
            fn model_id(&self) -> &str {
                "other-v2"
            }
            fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
                Ok(texts.iter().map(|_| vec![9.0]).collect())
            }
        }
        cache
            .embed(&texts(&["alpha"]), EmbedPurpose::Index)
            .unwrap();
        let other = Cached::new(Arc::new(Other), &db).unwrap();
        let v = other
            .embed(&texts(&["alpha"]), EmbedPurpose::Index)
            .unwrap();
        assert_eq!(v, vec![vec![9.0]]);
    }

    /// Records what it is charged; refuses past `limit` requests.
    struct Meter {
        charged: Mutex<Vec<(u64, u64)>>,
        limit: u64,
    }

    impl Spend for Meter {
        fn charge(&self, requests: u64, bytes: u64) -> Result<(), EmbedFailed> {
            let mut c = self.charged.lock().unwrap();
            if c.iter().map(|(r, _)| r).sum::<u64>() + requests > self.limit {
                return Err(EmbedFailed::LedgerUnavailable);
            }
            c.push((requests, bytes));
            Ok(())
        }
    }

    #[test]
    fn only_what_goes_upstream_is_charged_and_a_refusal_sends_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let backend = Arc::new(Counting(AtomicUsize::new(0)));
        let cache = Cached::new(
            backend.clone(),
            &crate::store::test_db(tmp.path().join("m.db")),
        )
        .unwrap();
        let meter = Meter {
            charged: Mutex::new(Vec::new()),
            limit: 4,
        };
        // 40 new texts: two requests of up to 32.
        let library: Vec<String> = (0..40).map(|i| format!("skill {i:02}")).collect();
        cache
            .embed_within(&library, EmbedPurpose::Index, &meter)
            .unwrap();
        assert_eq!(*meter.charged.lock().unwrap(), vec![(2, 40 * 8)]);
        // The same library again (another instance, a re-index): free.
        cache
            .embed_within(&library, EmbedPurpose::Index, &meter)
            .unwrap();
        assert_eq!(meter.charged.lock().unwrap().len(), 1);
        // One new text among them: one request of its bytes.
        let mut changed = library.clone();
        changed.push("a new skill".into());
        cache
            .embed_within(&changed, EmbedPurpose::Index, &meter)
            .unwrap();
        assert_eq!(meter.charged.lock().unwrap()[1], (1, 11));
        // Past the budget: refused before any request.
        let asked = backend.0.load(Ordering::SeqCst);
        let e = cache
            .embed_within(&texts(&["q1", "q2"]), EmbedPurpose::Query, &meter)
            .map(|_| ());
        cache
            .embed_within(&texts(&["q3"]), EmbedPurpose::Query, &meter)
            .unwrap_err();
        assert!(e.is_ok(), "the third request fit: {e:?}");
        assert_eq!(backend.0.load(Ordering::SeqCst), asked + 2);
    }

    #[test]
    fn a_backend_that_miscounts_is_an_error() {
        struct Short;
        impl Backend for Short {
            fn model_id(&self) -> &str {
                "short"
            }
            fn embed(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
                Ok(vec![vec![1.0]])
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cached::new(
            Arc::new(Short),
            &crate::store::test_db(tmp.path().join("m.db")),
        )
        .unwrap();
        let err = cache
            .embed(&texts(&["a", "b"]), EmbedPurpose::Index)
            .unwrap_err()
            .to_string();
        assert!(err.contains("1 vectors for 2 texts"), "{err}");
    }
}
