//! `correction`: the first-party scorer for what the user says next.
//!
//! The most honest signal about an answer is the user's reply to it. When
//! the next user message explicitly corrects the assistant ("no, that's
//! wrong", "that's not what I asked", "still broken", "I said tabs, not
//! spaces", "undo that", "stop") the turn gets -1.0 (`user-correction`);
//! when it shows frustration without a concrete correction ("ugh", "are you
//! even reading", "for the third time", "???", several words of ALL-CAPS
//! shouting) it gets -0.5 (`user-frustration`). The rationale quotes the
//! evidence. No next message, or a neutral or positive one ("thanks", "great,
//! now do X", "no problem", "is there no other way?"), gets no opinion:
//! silence is not approval, and a plain "thanks" says little about quality.
//!
//! Only `next-user-message` is read. Agent metadata that frameworks prepend
//! to user text (a `[Sun 2026-11-22 10:00 UTC]` timestamp, `Sender (untrusted
//! metadata): ```json …``` ` blocks) is stripped first, as are fenced code,
//! inline code and `>` quotes, so pasted logs and quoted text are not
//! mistaken for the user's own words. Matching works on words, not
//! substrings, and skips conditionals ("if that's wrong…") and yes/no
//! questions ("is that wrong?"): a false alarm costs more than a miss,
//! because rewards steer which skills get kept. A few Chinese, Japanese,
//! Spanish, German and French phrasings are recognised too.

use std::sync::LazyLock;

use metaclaw_plugin_sdk::scorer::{FinishedTurn, Guest, Metadata, PluginGuest, Reward, metadata};
use metaclaw_plugin_text::message::{
    self, Contractions, PhraseTable, Phrases, clip, split_sentences,
};

/// The user's own text: without a leading bracketed timestamp and without
/// the `… (untrusted metadata):` / `… (untrusted, for context):` blocks
/// that agent frameworks add around it.
pub use metaclaw_plugin_text::message::strip_metadata;

pub struct Correction;

impl PluginGuest for Correction {
    fn metadata() -> Metadata {
        metadata(
            "correction",
            env!("CARGO_PKG_VERSION"),
            "Negative reward when the user's next message corrects the assistant or shows frustration",
        )
    }
}

impl Guest for Correction {
    fn score(turn: FinishedTurn) -> Option<Reward> {
        score(&turn)
    }
}

// Exported only in the component build, so the logic also tests natively.
#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::scorer::export_scorer!(Correction);

/// What the user's next message says about the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An explicit correction: the answer was wrong, did not work, or did
    /// something the user did not want.
    Correction,
    /// Frustration without a concrete correction.
    Frustration,
}

impl Kind {
    pub fn value(self) -> f32 {
        match self {
            Kind::Correction => -1.0,
            Kind::Frustration => -0.5,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Kind::Correction => "user-correction",
            Kind::Frustration => "user-frustration",
        }
    }
}

/// A judgement on one user message, with the text that shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub kind: Kind,
    /// The message from the sentence that gave it away, clipped.
    pub evidence: String,
}

pub fn score(turn: &FinishedTurn) -> Option<Reward> {
    let next = turn.next_user_message.as_deref()?;
    let verdict = judge(next)?;
    let what = match verdict.kind {
        Kind::Correction => "corrects the answer",
        Kind::Frustration => "sounds frustrated",
    };
    Some(Reward {
        value: verdict.kind.value(),
        label: verdict.kind.label().into(),
        rationale: format!("the user's next message {what}: \"{}\"", verdict.evidence),
    })
}

/// Judges one user message; `None` when it is neutral or positive.
pub fn judge(message: &str) -> Option<Verdict> {
    let text = prose(&strip_metadata(message));
    let sentences: Vec<Sentence> = split_sentences(&text)
        .into_iter()
        .map(|(start, raw)| Sentence::new(start, raw))
        .collect();
    let verdict = |kind, s: &Sentence| Verdict {
        kind,
        evidence: clip(&text[s.start..]),
    };
    if let Some(s) = sentences.iter().find(|s| is_correction(s)) {
        return Some(verdict(Kind::Correction, s));
    }
    let positive = is_positive(&text);
    sentences
        .iter()
        .find(|s| is_frustration(s, positive))
        .map(|s| verdict(Kind::Frustration, s))
}

// ---------------------------------------------------------------------------
// Metadata and prose

/// The text a person typed: no fenced code, no `>` quotes, inline code
/// replaced by a neutral word.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            continue;
        }
        if let Some(open) = ["```", "~~~"].into_iter().find(|f| trimmed.starts_with(f)) {
            // A fence closed on the same line is a one-line code span.
            if !trimmed[3..].contains(open) {
                fence = Some(open);
            }
            continue;
        }
        if trimmed.starts_with('>') {
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                if in_code {
                    out.push_str(" code ");
                }
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------
// Words

/// One sentence, as raw text and as normalised words.
struct Sentence<'a> {
    start: usize,
    raw: &'a str,
    /// Lowercased, for phrases matched as substrings (CJK).
    lower: String,
    /// Lowercased, accents folded, apostrophes dropped ("that's" → "thats"),
    /// common two-word forms contracted ("that is" → "thats").
    words: Vec<String>,
    /// `pause[i]`: punctuation between `words[i]` and `words[i + 1]`.
    pause: Vec<bool>,
    question: bool,
}

impl Phrases for Sentence<'_> {
    fn words(&self) -> &[String] {
        &self.words
    }
}

impl<'a> Sentence<'a> {
    fn new(start: usize, raw: &'a str) -> Self {
        let (words, pause) = words(raw);
        Sentence {
            start,
            raw,
            lower: raw.to_lowercase(),
            words,
            pause,
            question: raw.trim_end_matches(['!', '！']).ends_with(['?', '？']),
        }
    }

    /// Where the content starts, after interjections ("ok, so, wait, …")
    /// and, when `past_no`, after "no"/"nope" too.
    fn lead(&self, from: usize, past_no: bool) -> usize {
        let mut i = from;
        while i < self.words.len()
            && (LEAD.contains(&self.word(i)) || (past_no && NO.contains(&self.word(i))))
        {
            i += 1;
        }
        i
    }

    /// A yes/no question ("is that wrong?", "does it not work on X?")
    /// asks rather than tells.
    fn yes_no_question(&self) -> bool {
        self.question && AUX.contains(&self.word(self.lead(0, true)))
    }

    /// A match at word `i` that is hypothetical ("if it's wrong, …").
    fn conditional(&self, i: usize) -> bool {
        self.words[..i]
            .iter()
            .any(|w| CONDITIONAL.contains(&w.as_str()))
    }

    /// A match at word `i` that is hypothetical or asked about, not said.
    fn hedged(&self, i: usize) -> bool {
        self.yes_no_question() || self.conditional(i)
    }

    fn any_word(&self, set: &[&str]) -> bool {
        self.words.iter().any(|w| set.contains(&w.as_str()))
    }
}

/// Normalised words and, for each, whether punctuation follows it.
fn words(text: &str) -> (Vec<String>, Vec<bool>) {
    message::words(text, CONTRACTIONS)
}

/// "that is" → "thats", "does not" → "doesnt", "cannot" → "cant", "u" →
/// "you", …
const CONTRACTIONS: Contractions = Contractions {
    pairs: &[
        ("that", "is", "thats"),
        ("it", "is", "its"),
        ("you", "are", "youre"),
        ("i", "am", "im"),
        ("what", "is", "whats"),
        ("do", "not", "dont"),
        ("does", "not", "doesnt"),
        ("did", "not", "didnt"),
        ("is", "not", "isnt"),
        ("are", "not", "arent"),
        ("was", "not", "wasnt"),
        ("were", "not", "werent"),
        ("can", "not", "cant"),
        ("will", "not", "wont"),
        ("have", "not", "havent"),
        ("has", "not", "hasnt"),
        ("should", "not", "shouldnt"),
    ],
    words: &[("cannot", "cant"), ("u", "you")],
};

// ---------------------------------------------------------------------------
// Corrections

const LEAD: &[&str] = &[
    "ok",
    "okay",
    "oh",
    "well",
    "hmm",
    "hm",
    "um",
    "uh",
    "so",
    "but",
    "and",
    "wait",
    "hey",
    "please",
    "just",
    "sorry",
    "dude",
    "man",
    "bro",
    "yeah",
    "look",
    "listen",
    "again",
    "sigh",
    "ugh",
    "argh",
    "seriously",
    "honestly",
];
const NO: &[&str] = &["no", "nope", "nah", "nein", "non"];
const AUX: &[&str] = &[
    "is", "are", "was", "were", "am", "do", "does", "did", "can", "could", "would", "will",
    "should", "shall", "have", "has", "isnt", "arent", "wasnt", "dont", "doesnt", "didnt", "wont",
    "cant", "shouldnt", "thats", "its", "youre", "im", "might", "may",
];
const CONDITIONAL: &[&str] = &["if", "unless", "whether", "case", "suppose", "supposing"];

/// The phrase tables, indexed once per instance (see [`PhraseTable`]).
struct Tables {
    resolved: PhraseTable<'static>,
    correction: PhraseTable<'static>,
    correcting: PhraseTable<'static>,
    after_no: PhraseTable<'static>,
    said: PhraseTable<'static>,
    frustration: PhraseTable<'static>,
}

static TABLES: LazyLock<Tables> = LazyLock::new(|| Tables {
    resolved: PhraseTable::new(RESOLVED),
    correction: PhraseTable::new(CORRECTION_PHRASES),
    correcting: PhraseTable::new(CORRECTING),
    after_no: PhraseTable::new(AFTER_NO),
    said: PhraseTable::new(SAID),
    frustration: PhraseTable::new(FRUSTRATION_PHRASES),
});

/// Said anywhere in a sentence, these correct the answer.
const CORRECTION_PHRASES: &[&str] = &[
    // It is wrong.
    "thats wrong",
    "thats incorrect",
    "thats false",
    "thats not right",
    "thats not correct",
    "thats not true",
    "thats not it",
    "thats not what",
    "thats not how",
    "thats the wrong",
    "this is wrong",
    "this is incorrect",
    "this is not what",
    "this isnt what",
    "this isnt right",
    "this is not right",
    "its wrong",
    "its incorrect",
    "its not right",
    "its not correct",
    "its not what",
    "still wrong",
    "still incorrect",
    "all wrong",
    "completely wrong",
    "totally wrong",
    "wrong again",
    "youre wrong",
    "youre mistaken",
    "not quite right",
    "not what i asked",
    "not what i wanted",
    "not what i meant",
    "not what i said",
    "not what i need",
    "not what i needed",
    "not what i requested",
    "not what i was asking",
    "not what i expected",
    "isnt what i",
    "wasnt what i",
    "a misunderstanding",
    // You misread me.
    "you got it wrong",
    "you got that wrong",
    "you got this wrong",
    "you have it wrong",
    "you did it wrong",
    "you misunderstood",
    "you misunderstand",
    "you misread",
    "you misinterpreted",
    "you made that up",
    "you made it up",
    "you made this up",
    "youre hallucinating",
    "you hallucinated",
    // I did not ask for that.
    "i didnt ask",
    "i never asked",
    "i didnt want",
    "i didnt say",
    "i never said",
    "i didnt tell you",
    "who asked you",
    "i asked you not",
    "i told you not",
    "i said not",
    "i said dont",
    "i told you to",
    "i already told you",
    "i already said",
    "i already asked",
    "i just told you",
    "i just said",
    "what i meant",
    "what i asked for",
    // It does not work.
    "didnt work",
    "doesnt work",
    "never works",
    "never worked",
    "why doesnt it work",
    "why doesnt this work",
    "why doesnt that work",
    "why isnt it working",
    "why isnt this working",
    "dont work",
    "that wont work",
    "this wont work",
    "not working",
    "isnt working",
    "no longer works",
    "stopped working",
    "didnt fix",
    "doesnt fix",
    "didnt help",
    "didnt change anything",
    "didnt do anything",
    "not fixed",
    "isnt fixed",
    "still broken",
    "still failing",
    "still fails",
    "still crashes",
    "still crashing",
    "still the same",
    "still getting",
    "still seeing",
    "still happening",
    "still happens",
    "still doesnt",
    "still didnt",
    "still wont",
    "still cant",
    "still returns",
    "still shows",
    "still says",
    "still throws",
    "still gives",
    "still errors",
    "still no",
    "same error",
    "same issue",
    "same problem",
    "same exception",
    "you broke",
    "broke it",
    "broke everything",
    "its broken",
    "thats broken",
    "made it worse",
    "even worse",
    "worse now",
    // You did what you should not have.
    "what did you do",
    "what have you done",
    "why would you",
    "dont do that",
    "never do that",
    "dont ever do",
    "you forgot",
    "you missed",
    "you ignored",
    "you left out",
    "you skipped",
    "you overwrote",
    "you deleted my",
    "you removed my",
    "you still havent",
    "you were supposed to",
    "you werent supposed to",
    "you should have",
    "you shouldnt have",
    "read my message",
    "read my question",
    "read my request",
    "read my instructions",
    "read the question",
    "read the instructions",
    "read it again",
    // It does not exist.
    "doesnt exist",
    "dont exist",
    "there is no such",
    "theres no such",
    "isnt a real",
    "not a real",
    // Put it back.
    "roll it back",
    "roll that back",
    "put it back",
    "change it back",
    "put that back",
    "change that back",
    "go back to the",
    "restore the original",
    "restore the previous",
    // Spanish, German, French.
    "esta mal",
    "no es correcto",
    "no es lo que",
    "incorrecto",
    "incorrecta",
    "te equivocas",
    "te equivocaste",
    "estas equivocado",
    "no funciona",
    "sigue sin funcionar",
    "sigue fallando",
    "deshaz",
    "falsch",
    "falsche",
    "falschen",
    "falsches",
    "stimmt nicht",
    "funktioniert nicht",
    "immer noch nicht",
    "nicht was ich",
    "nicht das was ich",
    "ruckgangig",
    "cest faux",
    "cest pas ce que",
    "ce nest pas ce que",
    "ne marche pas",
    "marche pas",
    "ne fonctionne pas",
    "toujours pas",
];

/// Chinese and Japanese corrections, matched as substrings.
const CORRECTION_CJK: &[&str] = &[
    "不对",
    "错了",
    "不是这样",
    "不是我要",
    "不是我想要",
    "搞错",
    "弄错",
    "理解错",
    "还是不行",
    "还是不对",
    "还是报错",
    "还是错",
    "撤销",
    "改回去",
    "違う",
    "違います",
    "ちがう",
    "間違って",
    "間違えて",
    "間違えた",
    "間違いです",
    "そうじゃない",
    "そうではない",
    "動かない",
    "動きません",
    "元に戻して",
];

/// "The output is wrong": what can be wrong about an answer.
const SUBJECTS: &[&str] = &[
    "this",
    "that",
    "it",
    "output",
    "result",
    "results",
    "answer",
    "code",
    "fix",
    "solution",
    "number",
    "numbers",
    "value",
    "values",
    "response",
    "translation",
    "calculation",
    "math",
    "sum",
    "total",
    "count",
    "date",
    "format",
    "formatting",
    "link",
    "url",
    "path",
    "command",
    "query",
    "regex",
    "import",
    "imports",
    "version",
    "syntax",
    "summary",
    "everything",
    "logic",
    "explanation",
    "change",
    "changes",
    "diff",
    "patch",
    "edit",
    "script",
    "function",
    "implementation",
    "one",
    "yours",
    "name",
    "file",
];

/// "You edited the wrong file": what there can be a wrong one of.
const WRONG_THINGS: &[&str] = &[
    "file",
    "files",
    "function",
    "method",
    "class",
    "directory",
    "folder",
    "path",
    "branch",
    "repo",
    "repository",
    "line",
    "variable",
    "command",
    "one",
    "answer",
    "approach",
    "place",
    "version",
    "format",
    "language",
    "name",
    "table",
    "column",
    "project",
    "module",
    "package",
    "field",
    "component",
    "page",
    "test",
    "tests",
    "key",
    "value",
    "question",
    "thing",
    "way",
    "endpoint",
    "server",
    "database",
    "library",
    "tool",
    "order",
    "units",
    "year",
    "date",
];

/// Things "no such" can be about.
const NO_SUCH: &[&str] = &[
    "function",
    "method",
    "file",
    "option",
    "flag",
    "command",
    "module",
    "package",
    "api",
    "field",
    "property",
    "attribute",
    "class",
    "endpoint",
    "setting",
    "parameter",
    "argument",
    "library",
    "crate",
    "directory",
    "folder",
    "column",
    "table",
    "key",
    "variable",
    "feature",
];

/// Words that, right after "no", make it a correction ("no, I said …").
const AFTER_NO: &[&str] = &[
    "thats",
    "this is",
    "its",
    "i said",
    "i meant",
    "i asked",
    "i wanted",
    "i want",
    "i told",
    "i need",
    "i didnt",
    "wrong",
    "incorrect",
    "stop",
    "undo",
    "revert",
    "dont",
    "why",
    "not that",
    "not this",
    "not what",
    "not like",
    "not the",
    "the other",
    "use",
    "you misunderstood",
    "you got",
    "you didnt",
    "you did",
    "you forgot",
    "you missed",
    "you broke",
    "it should",
    "it needs",
    "it has to",
    "it must",
    "that should",
    "that was",
    "it was",
    "instead",
];

/// After "no" or "actually", these make it agreement instead.
const AGREEING: &[&str] = &[
    "fine", "ok", "okay", "good", "great", "perfect", "correct", "right", "thanks", "thank",
    "worries", "problem", "exactly", "works", "worked", "nice", "also", "too", "sure",
];

/// Statements that the answer worked; a sentence with one is not a correction.
const RESOLVED: &[&str] = &[
    "works now",
    "now works",
    "it works",
    "that worked",
    "this worked",
    "that did it",
    "fixed it",
    "its fixed",
    "thats fixed",
    "working now",
    "now working",
];

fn is_correction(s: &Sentence) -> bool {
    if CORRECTION_CJK.iter().any(|p| s.lower.contains(p)) {
        return true;
    }
    if s.words.is_empty() || TABLES.resolved.any(s) {
        return false;
    }
    if TABLES
        .correction
        .find_all(s)
        .into_iter()
        .any(|(p, i)| !s.hedged(i) && !guarded_phrase(s, p, i))
    {
        return true;
    }
    judged_wrong(s)
        || wrong_thing(s)
        || sentence_initial(s)
        || after_no(s)
        || said_not(s)
        || undo(s)
        || why_did_you(s)
        || you_didnt(s)
        || no_such(s)
        || hallucinated(s)
}

/// Exceptions for particular phrases.
fn guarded_phrase(s: &Sentence, phrase: &str, i: usize) -> bool {
    let after = phrase.split(' ').count() + i;
    match phrase {
        // "the folder doesn't exist yet, create it" is information.
        "doesnt exist" | "dont exist" => s.word(after) == "yet",
        // "still no" answers "is there still no …" and "still not sure".
        "still no" => !matches!(
            s.word(after),
            "output" | "change" | "difference" | "luck" | "result" | "results" | "response"
        ),
        // "roll back the migration" may be a new task; "roll back" alone is not.
        "go back to the" => !matches!(
            s.word(after),
            "previous" | "old" | "original" | "last" | "first"
        ),
        "you should have" => matches!(
            s.word(after),
            "access" | "received" | "gotten" | "got" | "it" | "the"
        ),
        // "still getting used to it" is about the user.
        "still getting" | "still seeing" => matches!(
            s.word(after),
            "used" | "started" | "ready" | "better" | "familiar" | "to" | "into" | "along"
        ),
        "not working" => s.word(i.wrapping_sub(1)) == "im",
        _ => false,
    }
}

/// "the output is wrong", "this is broken", "it's still incorrect".
fn judged_wrong(s: &Sentence) -> bool {
    const JUDGED: &[&str] = &[
        "wrong",
        "incorrect",
        "broken",
        "false",
        "untrue",
        "inaccurate",
    ];
    const VERBS: &[&str] = &["is", "was", "are", "were", "looks", "seems", "look", "seem"];
    (1..s.words.len()).any(|i| {
        if !JUDGED.contains(&s.word(i)) || s.hedged(i) {
            return false;
        }
        let mut j = i - 1;
        while j > 0
            && matches!(
                s.word(j),
                "still" | "all" | "just" | "completely" | "totally" | "also" | "now"
            )
        {
            j -= 1;
        }
        if !VERBS.contains(&s.word(j)) || j == 0 {
            return false;
        }
        // "the old implementation was wrong" blames what came before.
        SUBJECTS.contains(&s.word(j - 1))
            && (j < 2
                || !matches!(
                    s.word(j - 2),
                    "old" | "original" | "previous" | "my" | "their" | "existing" | "former"
                ))
    })
}

/// "you edited the wrong file", "that's the wrong branch", "wrong file".
fn wrong_thing(s: &Sentence) -> bool {
    let lead = s.lead(0, true);
    (0..s.words.len()).any(|i| {
        if s.word(i) != "wrong" || !WRONG_THINGS.contains(&s.word(i + 1)) || s.hedged(i) {
            return false;
        }
        if i == lead {
            return true;
        }
        let article = i >= 1 && matches!(s.word(i - 1), "the" | "a");
        let before = &s.words[..i.saturating_sub(1)];
        article
            && before.iter().any(|w| {
                matches!(
                    w.as_str(),
                    "you" | "youve" | "youre" | "thats" | "its" | "still" | "again"
                )
            })
    })
}

/// Openings that correct: "wrong.", "incorrect, it's …", "actually it's …",
/// "I said …", "I meant …", "stop", "no no no".
fn sentence_initial(s: &Sentence) -> bool {
    let at = s.lead(0, true);
    let first = s.word(at);
    if s.question && matches!(first, "wrong" | "incorrect") {
        return false;
    }
    match first {
        "wrong" | "incorrect" | "nonsense" => true,
        "i" => {
            let next = s.word(at + 1);
            let then = s.word(at + 2);
            // "I said that to my manager" reports; "I said to use tabs" insists.
            let to_someone = |k: usize| {
                s.word(k) == "to"
                    && matches!(s.word(k + 1), "my" | "him" | "her" | "them" | "the" | "a")
            };
            let reported = to_someone(at + 2) || to_someone(at + 3);
            (matches!(next, "said" | "meant") && then != "thanks" && !reported)
                || (next == "asked" && matches!(s.word(at + 2), "for" | "you"))
        }
        "actually" => {
            let rest = at + 1;
            TABLES.correcting.at(s, rest).is_some()
                && !s.words[rest..]
                    .iter()
                    .any(|w| AGREEING.contains(&w.as_str()))
        }
        "stop" => {
            let next = s.word(at + 1);
            at + 1 >= s.words.len()
                || s.pause[at]
                || next.ends_with("ing")
                || matches!(
                    next,
                    "it" | "that"
                        | "this"
                        | "now"
                        | "please"
                        | "right"
                        | "immediately"
                        | "stop"
                        | "everything"
                        | "there"
                )
        }
        _ => false,
    }
}

/// After "actually", these correct ("actually it should …", "actually I meant …").
const CORRECTING: &[&str] = &[
    "its",
    "it should",
    "it needs",
    "it was",
    "it isnt",
    "thats",
    "that was",
    "that should",
    "that isnt",
    "no",
    "i meant",
    "i said",
    "i wanted",
    "i asked",
    "the correct",
    "the right",
    "the answer",
    "you",
    "the file",
    "the function",
];

/// "no, that's …", "nope, I said …", "no no no".
fn after_no(s: &Sentence) -> bool {
    let at = s.lead(0, false);
    if !NO.contains(&s.word(at)) {
        return false;
    }
    let mut next = s.lead(at + 1, false);
    // "no need", "no worries", "no thanks": not about the answer.
    if matches!(
        s.word(next),
        "need" | "worries" | "problem" | "thanks" | "rush" | "idea"
    ) {
        return false;
    }
    let repeated = NO.contains(&s.word(next));
    next = s.lead(next, true);
    let agreeing = s.words[next..]
        .iter()
        .any(|w| AGREEING.contains(&w.as_str()));
    if agreeing || s.yes_no_question() {
        return false;
    }
    repeated || TABLES.after_no.at(s, next).is_some()
}

/// "I said tabs, not spaces", "I asked for a list rather than a table".
fn said_not(s: &Sentence) -> bool {
    TABLES.said.find_all(s).into_iter().any(|(_, i)| {
        !s.hedged(i)
            && s.words[i + 2..].iter().enumerate().any(|(k, w)| {
                w == "not"
                    || (w == "instead" && s.word(i + 3 + k) == "of")
                    || (w == "rather" && s.word(i + 3 + k) == "than")
            })
    })
}

/// "I said …": followed by "not …", "instead of …", "rather than …", a correction.
const SAID: &[&str] = &[
    "i said",
    "i asked",
    "i told you",
    "i wanted",
    "i meant",
    "i requested",
];

/// "undo that", "revert your changes", "revert": the change was unwanted.
fn undo(s: &Sentence) -> bool {
    const WHAT: &[&str] = &[
        "that",
        "this",
        "it",
        "those",
        "these",
        "your",
        "what",
        "everything",
        "all",
        "back",
        "to",
        "last",
        "changes",
        "change",
        "edit",
        "edits",
    ];
    let lead = s.lead(0, true);
    if matches!(s.word(lead), "how" | "what" | "where") {
        return false;
    }
    (0..s.words.len()).any(|i| {
        // Where the verb's object starts: "undo that", "roll back that".
        let object = match s.word(i) {
            "undo" | "revert" | "rollback" => i + 1,
            "roll" if s.word(i + 1) == "back" => i + 2,
            _ => return false,
        };
        // "Can you undo that?" asks for the correction: only conditionals hedge.
        if s.conditional(i) {
            return false;
        }
        let next = s.word(object);
        let alone = i == lead && object >= s.words.len();
        let the_change = next == "the"
            && matches!(
                s.word(object + 1),
                "change" | "changes" | "last" | "edit" | "edits" | "previous"
            );
        alone || WHAT.contains(&next) || the_change
    })
}

/// "why did you delete …", "why are you rewriting …".
fn why_did_you(s: &Sentence) -> bool {
    const UNWANTED: &[&str] = &[
        "change",
        "delete",
        "remove",
        "do",
        "add",
        "touch",
        "modify",
        "edit",
        "rewrite",
        "break",
        "rename",
        "move",
        "ignore",
        "overwrite",
        "revert",
        "drop",
        "undo",
        "replace",
        "install",
        "commit",
        "push",
        "reformat",
        "refactor",
    ];
    (0..s.words.len()).any(|i| {
        (s.at(i, "why did you") && UNWANTED.contains(&s.word(i + 3)))
            || (s.at(i, "why are you") && s.word(i + 3).ends_with("ing"))
    })
}

/// "you didn't read my message", "you haven't fixed it".
fn you_didnt(s: &Sentence) -> bool {
    const DIDNT: &[&str] = &[
        "do",
        "fix",
        "read",
        "follow",
        "listen",
        "answer",
        "change",
        "update",
        "address",
        "include",
        "handle",
        "run",
        "test",
        "actually",
        "even",
        "add",
        "save",
        "apply",
        "implement",
        "use",
        "finish",
        "complete",
        "understand",
        "solve",
        "respond",
        "look",
        "check",
    ];
    const HAVENT: &[&str] = &[
        "fixed",
        "done",
        "answered",
        "changed",
        "addressed",
        "read",
        "solved",
        "implemented",
        "updated",
        "listened",
    ];
    (0..s.words.len()).any(|i| {
        let next = s.word(i + 2);
        let matched = (s.at(i, "you didnt") && DIDNT.contains(&next))
            || (s.at(i, "you havent") && HAVENT.contains(&next));
        matched && !s.hedged(i)
    })
}

/// "there's no such function", "no such flag".
fn no_such(s: &Sentence) -> bool {
    (0..s.words.len())
        .any(|i| s.at(i, "no such") && NO_SUCH.contains(&s.word(i + 2)) && !s.hedged(i))
}

/// "you're hallucinating", "hallucinated API".
fn hallucinated(s: &Sentence) -> bool {
    s.words.iter().any(|w| w.starts_with("hallucinat")) && !s.yes_no_question()
}

// ---------------------------------------------------------------------------
// Frustration

/// Phrases that show frustration on their own.
const FRUSTRATION_PHRASES: &[&str] = &[
    "what the hell",
    "what the heck",
    "the fuck",
    "for fucks sake",
    "for gods sake",
    "for christs sake",
    "damn it",
    "bloody hell",
    "are you kidding",
    "you kidding me",
    "are you serious",
    "are you even",
    "are you listening",
    "are you reading",
    "did you even",
    "do you even",
    "are you stupid",
    "are you dumb",
    "are you blind",
    "how many times do i",
    "how many times have i",
    "how many times must i",
    "how many times should i",
    "how many more times",
    "how many times are you",
    "like i said",
    "as i said before",
    "as i already said",
    "as i already mentioned",
    "as i mentioned before",
    "i give up",
    "waste of time",
    "waste of my time",
    "wasting my time",
    "wasted my time",
    "im frustrated",
    "getting frustrated",
    "so frustrated",
    "tired of this",
    "sick of",
    "fed up",
    "what are you doing",
    "why cant you",
    "why is this so hard",
    "why is it so hard",
    "taking forever",
    "youre useless",
    "you are useless",
    "youre stupid",
    "youre dumb",
    "otra vez no",
    "por tercera vez",
    "schon wieder",
    "zum dritten mal",
];

const FRUSTRATION_CJK: &[&str] = &[
    "没用",
    "烦死",
    "搞什么",
    "什么鬼",
    "无语",
    "说了多少遍",
    "我已经说过",
    "何回言",
    "いい加減",
    "ふざけ",
];

/// Words of exasperation.
const EXASPERATED: &[&str] = &[
    "wtf",
    "wth",
    "ffs",
    "smh",
    "jfc",
    "fml",
    "omfg",
    "jeez",
    "geez",
    "sigh",
    "facepalm",
    "dammit",
    "goddammit",
    "goddamn",
    "fuck",
    "fucking",
    "fucked",
    "fck",
];

/// Adjectives that are frustration after "this is", "so", "completely", …
const SCATHING: &[&str] = &[
    "useless",
    "pointless",
    "ridiculous",
    "annoying",
    "frustrating",
    "hopeless",
    "stupid",
    "dumb",
    "idiotic",
    "terrible",
    "awful",
    "garbage",
    "trash",
    "infuriating",
    "maddening",
    "crap",
    "shit",
    "bullshit",
];
const INTENSIFIERS: &[&str] = &[
    "is",
    "so",
    "totally",
    "completely",
    "utterly",
    "youre",
    "thats",
    "its",
    "absolutely",
    "pretty",
    "really",
    "very",
    "are",
    "was",
    "how",
    "such",
];

const ORDINALS: &[&str] = &[
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "tenth",
    "nth",
    "umpteenth",
    "hundredth",
    "millionth",
    "2nd",
    "3rd",
    "4th",
    "5th",
    "last",
];

/// Words that make "!!!" or capitals excitement rather than anger.
const POSITIVE: &[&str] = &[
    "thanks",
    "thank",
    "thx",
    "ty",
    "great",
    "perfect",
    "awesome",
    "amazing",
    "nice",
    "love",
    "excellent",
    "wonderful",
    "fantastic",
    "brilliant",
    "cool",
    "yay",
    "woohoo",
    "wow",
    "works",
    "worked",
    "congrats",
    "lol",
    "haha",
    "lmao",
    "finally",
    "gracias",
    "danke",
    "merci",
    "beautiful",
    "incredible",
    "yes",
    "yess",
    "yesss",
];
const POSITIVE_CJK: &[&str] = &["谢谢", "太好了", "感谢", "ありがとう", "完璧", "すごい"];

fn is_positive(text: &str) -> bool {
    let (words, _) = words(text);
    words.iter().any(|w| POSITIVE.contains(&w.as_str()))
        || POSITIVE_CJK.iter().any(|p| text.contains(p))
}

fn is_frustration(s: &Sentence, positive: bool) -> bool {
    if FRUSTRATION_CJK.iter().any(|p| s.lower.contains(p)) {
        return true;
    }
    if s.words.is_empty() {
        return false;
    }
    // "Are you even reading?" is asked to be answered by a change, not a yes.
    if TABLES
        .frustration
        .find_all(s)
        .into_iter()
        .any(|(_, i)| !s.conditional(i))
    {
        return true;
    }
    let lead = s.lead(0, true);
    let ordinal_time = (0..s.words.len()).any(|i| {
        s.at(i, "for the") && ORDINALS.contains(&s.word(i + 2)) && s.word(i + 3) == "time"
    });
    let ugh = s.words.iter().any(|w| is_ugh(w));
    let scathing = (0..s.words.len()).any(|i| {
        SCATHING.contains(&s.word(i))
            && ((i > 0 && INTENSIFIERS.contains(&s.word(i - 1))) || s.words.len() <= 2)
    });
    let come_on = (s.at(lead, "come on") || s.word(lead) == "cmon")
        && !matches!(
            s.word(lead + 2),
            "the" | "in" | "over" | "board" | "down" | "up" | "back" | "by"
        );
    let seriously = s.word(0) == "seriously" && (s.words.len() == 1 || s.question || s.pause[0]);
    let again = s.words.len() == 1 && s.word(0) == "again" && s.raw.contains(['?', '!']);
    let you_keep = (0..s.words.len())
        .any(|i| s.at(i, "you keep") && (s.word(i + 2).ends_with("ing") || s.word(i + 2) == "on"));
    if ordinal_time || ugh || scathing || come_on || seriously || again || you_keep {
        return true;
    }
    // Swearing and punctuation or capitals can be joy, too.
    !positive && (s.any_word(EXASPERATED) || punctuation_run(s) || shouting(s.raw))
}

/// "ugh", "ughhh", "argh", "aaargh".
fn is_ugh(word: &str) -> bool {
    let squeeze: String = word.chars().fold(String::new(), |mut acc, c| {
        if !acc.ends_with(c) {
            acc.push(c);
        }
        acc
    });
    matches!(squeeze.as_str(), "ugh" | "argh" | "agh" | "grr" | "gah")
}

/// Three or more `!`/`?` in a row: "why???", "?!?", "not again!!!". Bare
/// "!!!" is as often delight as anger, so it counts only next to a word of
/// complaint.
fn punctuation_run(s: &Sentence) -> bool {
    const COMPLAINT: &[&str] = &[
        "not", "no", "dont", "doesnt", "didnt", "wont", "isnt", "never", "stop", "why", "wrong",
        "again", "still", "fix", "already", "said", "told", "broken", "failing", "fails",
    ];
    let mut run = 0;
    let mut asked = false;
    for c in s.raw.chars() {
        if matches!(c, '!' | '?' | '！' | '？') {
            run += 1;
            asked |= matches!(c, '?' | '？');
            if run >= 3 && (asked || s.any_word(COMPLAINT)) {
                return true;
            }
        } else {
            run = 0;
            asked = false;
        }
    }
    false
}

/// Several words of ALL-CAPS prose ("WHY DID YOU DELETE IT"), not a run of
/// acronyms ("the AWS SDK API").
fn shouting(raw: &str) -> bool {
    const COMMON: &[&str] = &[
        "I", "YOU", "THE", "A", "IS", "IT", "NOT", "DO", "DONT", "DID", "DIDNT", "WHY", "WHAT",
        "THIS", "THAT", "TO", "ARE", "JUST", "STOP", "NO", "ME", "MY", "CAN", "CANT", "AGAIN",
        "SAID", "TOLD", "ASKED", "PLEASE", "AND", "OF", "IN", "ON", "FOR", "WITH", "HOW", "MANY",
        "TIMES", "EVEN", "YOUR", "WHEN", "WILL", "HAVE", "READ", "LISTEN", "NEVER", "ALWAYS",
        "KEEP", "WORK", "FIX", "ALREADY", "SAME", "STILL", "DOES", "DOESNT", "IM", "WRONG",
    ];
    let mut run = 0;
    let mut common = 0;
    for token in raw.split_whitespace() {
        let core: String = token
            .trim_matches(|c: char| !c.is_alphanumeric())
            .chars()
            .filter(|c| !matches!(c, '\'' | '’'))
            .collect();
        let caps = !core.is_empty() && core.chars().all(|c| c.is_ascii_uppercase());
        if caps {
            run += 1;
            if COMMON.contains(&core.as_str()) {
                common += 1;
            }
            if run >= 3 && (common >= 2 || run >= 5) {
                return true;
            }
        } else {
            run = 0;
            common = 0;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use metaclaw_plugin_sdk::scorer::Message;

    fn kind(message: &str) -> Option<Kind> {
        judge(message).map(|v| v.kind)
    }

    #[test]
    fn explicit_corrections() {
        for m in [
            "No, that's wrong.",
            "that's not what I asked",
            "Incorrect.",
            "Incorrect, the capital of Australia is Canberra",
            "You misunderstood me: I want the totals per month",
            "Actually it's the other way round, the key comes first",
            "That didn't work.",
            "still broken",
            "Wrong file! I meant src/main.rs",
            "you edited the wrong file",
            "I said tabs, not spaces",
            "I said use tabs",
            "undo that",
            "Please revert your changes",
            "revert",
            "Stop.",
            "stop, you're deleting my tests",
            "stop changing the config",
            "nope, I meant the staging server",
            "no no no",
            "No, use the other endpoint",
            "The output is still wrong",
            "this is broken now",
            "It doesn't work, same error as before",
            "Thanks, but it still doesn't compile",
            "why did you delete the README?",
            "You forgot to update the tests",
            "you didn't read my message",
            "That function doesn't exist",
            "there's no such flag in ripgrep",
            "you're hallucinating again",
            "not quite right, the dates are off by one",
            "I never asked you to touch the CI config",
            "Doesn't work.",
            "why doesn't it work?",
            "That's not right",
            "Oh come on, that's the wrong branch",
            "Can you undo that?",
            "roll back your changes",
            "No, I need the full path",
            "When I run it, it still fails",
        ] {
            assert_eq!(kind(m), Some(Kind::Correction), "{m}");
        }
    }

    #[test]
    fn multilingual_corrections() {
        for m in [
            "不对，应该是2024年",
            "你理解错了",
            "还是不行",
            "違うよ、そのファイルじゃない",
            "間違っています",
            "No, eso está mal",
            "sigue sin funcionar",
            "Das ist falsch.",
            "funktioniert immer noch nicht",
            "Non, c'est faux",
        ] {
            assert_eq!(kind(m), Some(Kind::Correction), "{m}");
        }
    }

    #[test]
    fn frustration() {
        for m in [
            "ugh",
            "Ughhh. Whatever.",
            "this is useless",
            "are you even reading what I write",
            "For the third time, the port is 8080",
            "why???",
            "Seriously?",
            "WHY IS THIS SO HARD",
            "DO IT THE WAY I TOLD YOU",
            "wtf",
            "come on",
            "how many times do I have to say it",
            "you keep adding comments everywhere",
            "什么鬼",
            "Are you even reading my messages?",
            "this is crap",
            "it's not even compiling!!!",
        ] {
            assert_eq!(kind(m), Some(Kind::Frustration), "{m}");
        }
    }

    #[test]
    fn neutral_and_positive_messages_get_no_opinion() {
        for m in [
            "thanks",
            "Great, now do the same for the users table",
            "no problem",
            "not bad",
            "can you also add a test?",
            "is there no other way?",
            "No.",
            "no, that's fine",
            "No thanks, that's enough for today",
            "No, you don't need to add tests",
            "Is that wrong?",
            "If the result is wrong, tell me",
            "what's wrong with my regex?",
            "nothing wrong with that approach",
            "you can't go wrong with postgres",
            "Fix the incorrect type annotation in utils.py",
            "how do I undo the last commit in git?",
            "Stop the dev server and run the migrations",
            "Actually, can you also add logging?",
            "Actually it's fine, leave it",
            "Thanks!!! That fixed it",
            "PERFECT THANK YOU SO MUCH",
            "Use the AWS SDK API for this",
            "it works now, the earlier version didn't work because of the cache",
            "The folder doesn't exist yet, please create it",
            "Let me know if it doesn't work",
            "How many times does the loop run?",
            "Write a function that reports the wrong answers in the quiz",
            "Here is the log:\n```\nerror: still failing, that's wrong\n```\nlooks fine to me",
            "> that's wrong\nI disagree with the reviewer, keep it",
            "no need, I'll do it myself",
            "Roll back the database migration 0042 on staging",
            "You keep the old config around, right?",
            "Damn, that was fast",
            "I can't believe how fast that was!!!",
            "I said that to my manager already, she agrees",
            "The old implementation was wrong about leap years; keep your fix",
            "I'm still getting used to Rust",
            "ありがとう",
            "谢谢，很好",
            "",
        ] {
            assert_eq!(kind(m), None, "{m}");
        }
    }

    #[test]
    fn strips_agent_metadata() {
        let message = "Conversation info (untrusted metadata):\n```json\n{\"chat\": \"wrong channel\"}\n```\n\nSender (untrusted metadata): ```json {\"name\": \"ana\", \"note\": \"that's wrong\"}```\n[Sun 2026-11-22 10:00 UTC] thanks, looks good";
        assert_eq!(strip_metadata(message), "thanks, looks good");
        assert_eq!(kind(message), None);
        let corrected = "[Sun 2026-11-22 10:00 UTC] no, that's wrong";
        assert_eq!(strip_metadata(corrected), "no, that's wrong");
        assert_eq!(kind(corrected), Some(Kind::Correction));
        let bare = "Sender (untrusted metadata): {\"id\": \"}\"}\nstill broken";
        assert_eq!(strip_metadata(bare), "still broken");
        assert_eq!(strip_metadata("[1] first point"), "[1] first point");
    }

    #[test]
    fn quotes_the_evidence() {
        let v =
            judge("Sure. But that didn't work: the build fails with the same error on line 12.");
        assert_eq!(
            v,
            Some(Verdict {
                kind: Kind::Correction,
                evidence: "But that didn't work: the build fails with the same error on line 12."
                    .into(),
            })
        );
        let long = format!("that's wrong {}", "x ".repeat(200));
        let evidence = judge(&long).map(|v| v.evidence).unwrap_or_default();
        assert!(
            evidence.chars().count() <= 100 && evidence.ends_with('…'),
            "{evidence}"
        );
    }

    fn turn(next: Option<&str>) -> FinishedTurn {
        let message = |role: &str, content: &str| Message {
            role: role.into(),
            content: content.into(),
            tool_call_id: None,
            tool_calls: Vec::new(),
        };
        FinishedTurn {
            session_id: "s".into(),
            turn_id: "t".into(),
            request: vec![message("user", "rename foo to bar")],
            response: message("assistant", "Done: renamed foo to bar."),
            tool_results: Vec::new(),
            next_user_message: next.map(str::to_string),
            status: "ok".into(),
        }
    }

    #[test]
    fn scores_turns() {
        assert!(score(&turn(None)).is_none());
        assert!(score(&turn(Some("thanks!"))).is_none());
        let corrected =
            score(&turn(Some("no, I said baz"))).map(|r| (r.value, r.label, r.rationale));
        assert_eq!(
            corrected,
            Some((
                -1.0,
                "user-correction".to_string(),
                "the user's next message corrects the answer: \"no, I said baz\"".to_string()
            ))
        );
        let frustrated = score(&turn(Some("ugh, are you kidding me"))).map(|r| (r.value, r.label));
        assert_eq!(frustrated, Some((-0.5, "user-frustration".to_string())));
    }

    /// The indexed tables find exactly what matching phrase by phrase
    /// found, on real messages (the OpenClaw fixtures) and on every string
    /// in this file (the tables' own phrases and the tests' messages), alone
    /// and after a few words.
    #[test]
    fn phrase_tables_match_like_phrase_by_phrase() {
        use metaclaw_plugin_text::testing::{openclaw_texts, string_literals, table_agrees};
        let tables: [(&[&str], &PhraseTable); 6] = [
            (RESOLVED, &TABLES.resolved),
            (CORRECTION_PHRASES, &TABLES.correction),
            (CORRECTING, &TABLES.correcting),
            (AFTER_NO, &TABLES.after_no),
            (SAID, &TABLES.said),
            (FRUSTRATION_PHRASES, &TABLES.frustration),
        ];
        let mut texts = openclaw_texts().unwrap();
        for literal in string_literals(include_str!("lib.rs")) {
            texts.push(format!("ok so {literal}"));
            texts.push(literal);
        }
        let (mut sentences, mut matches) = (0, 0);
        for text in &texts {
            for (start, raw) in split_sentences(&prose(&strip_metadata(text))) {
                let s = Sentence::new(start, raw);
                sentences += 1;
                for (phrases, table) in tables {
                    matches += table_agrees(phrases, table, &s).unwrap();
                }
            }
        }
        assert!(
            sentences > 2_000 && matches > 1_000,
            "{sentences} {matches}"
        );
    }
}
