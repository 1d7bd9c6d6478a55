//! `repeated-refusals`: the first-party scorer for an assistant that keeps refusing.
//!
//! A single refusal may well be right, so it gets no opinion. A refusal
//! that follows an earlier one in the same conversation is a pattern worth
//! learning from: the assistant is stuck saying no (often to something it
//! could do, or after the user has explained themselves), and the turn gets
//! -1.0 with the label `repeated-refusal`. The rationale says how many
//! refusals came in a row and in the whole conversation.
//!
//! A refusal is an answer, without tool calls and without a code block,
//! whose opening sentences decline: "I can't help with that", "I'm unable
//! to …", "I cannot assist", "I'm sorry, but I can't …", "I won't be able
//! to …", "I must decline", "As an AI, I …" (and a few Chinese, Japanese,
//! Spanish, German and French forms). Other uses of "can't" ("you can't go
//! wrong with X", "I can't wait", "I can't help but notice", "if I can't
//! find it, …") are not refusals.
//!
//! Also repeated: a refusal right after the user rephrased the request that
//! the previous answer turned down, even when that earlier answer declined
//! in words this scorer would not call a refusal on their own ("Sorry, that's
//! not something I do"). The rephrasing is recognised by the two user
//! messages sharing most of their content words.

use std::sync::LazyLock;

use metaclaw_plugin_sdk::scorer::{
    FinishedTurn, Guest, Message, Metadata, PluginGuest, Reward, metadata,
};
use metaclaw_plugin_text::message::{
    self, Contractions, PhraseTable, Phrases, clip, split_sentences,
};

/// A user message without the agent metadata frameworks put around it: a
/// leading `[Sun 2026-11-22 10:00 UTC]` timestamp and `… (untrusted
/// metadata):` blocks (whose shared JSON would make any two messages look
/// alike).
pub use metaclaw_plugin_text::message::strip_metadata;

pub struct Refusals;

impl PluginGuest for Refusals {
    fn metadata() -> Metadata {
        metadata(
            "repeated-refusals",
            env!("CARGO_PKG_VERSION"),
            "Negative reward when the assistant refuses again after an earlier refusal",
        )
    }
}

impl Guest for Refusals {
    fn score(turn: FinishedTurn) -> Option<Reward> {
        score(&turn)
    }
}

// Exported only in the component build, so the logic also tests natively.
#[cfg(target_arch = "wasm32")]
metaclaw_plugin_sdk::scorer::export_scorer!(Refusals);

pub fn score(turn: &FinishedTurn) -> Option<Reward> {
    if !turn.response.tool_calls.is_empty() {
        return None;
    }
    let said = refusal(&turn.response.content)?;
    let assistant: Vec<&Message> = turn
        .request
        .iter()
        .filter(|m| m.role == "assistant")
        .collect();
    let earlier = assistant.iter().filter(|m| is_refusal(m)).count();
    let in_a_row = 1 + assistant.iter().rev().take_while(|m| is_refusal(m)).count();
    if earlier > 0 {
        let total = earlier + 1;
        let rationale = if in_a_row == total {
            format!("refused again (\"{said}\"): {in_a_row} refusals in a row")
        } else {
            format!(
                "refused again (\"{said}\"): {total} refusals in this conversation, {in_a_row} in a row"
            )
        };
        return Some(repeated(rationale));
    }
    if rephrased_after_soft_refusal(&turn.request) {
        return Some(repeated(format!(
            "refused (\"{said}\") after the user rephrased the request the previous answer declined: 2 refusals in a row"
        )));
    }
    None
}

fn repeated(rationale: String) -> Reward {
    Reward {
        value: -1.0,
        label: "repeated-refusal".into(),
        rationale,
    }
}

/// Whether an assistant message in the conversation was a refusal.
fn is_refusal(message: &Message) -> bool {
    message.tool_calls.is_empty() && refusal(&message.content).is_some()
}

/// The sentence that refuses, clipped, when `answer` is a refusal.
pub fn refusal(answer: &str) -> Option<String> {
    // An answer with code in it is helping, whatever it says around it.
    if answer.contains("```") || answer.contains("~~~") {
        return None;
    }
    opening(answer)
        .into_iter()
        .find(|s| refuses(s))
        .map(|s| clip(s.raw))
}

/// The first sentences of an answer, where a refusal says so.
fn opening(answer: &str) -> Vec<Sentence<'_>> {
    split_sentences(answer)
        .into_iter()
        .map(|(_, raw)| Sentence::new(raw))
        .filter(|s| !s.words.is_empty())
        .take(3)
        .collect()
}

// ---------------------------------------------------------------------------
// What a refusal looks like

/// "I can't", "I'm unable to", …: then the verb decides. Written as the
/// words come out of `contract` ("I will not" is "i wont", "I am" is "im").
const MODALS: &[&str] = &[
    "i wont be able to",
    "i dont think i can",
    "i cant",
    "i wont",
    "im unable to",
    "im not able to",
    "im not going to",
    "im not allowed to",
    "im not permitted to",
    "im not in a position to",
];

/// Modals that refuse whatever the verb, bar a few that merely report.
const FIRM_MODALS: &[&str] = &[
    "im unable to",
    "im not able to",
    "im not allowed to",
    "im not permitted to",
    "im not in a position to",
];

/// Verbs that refuse on their own: "I can't help", "I cannot comply".
const REFUSING_VERBS: &[&str] = &[
    "help",
    "assist",
    "comply",
    "fulfill",
    "fulfil",
    "accommodate",
    "engage",
    "participate",
    "condone",
    "endorse",
    "encourage",
    "facilitate",
    "aid",
    "support",
];

/// Verbs that refuse with an object that points at the request:
/// "I can't do that", "I won't write this", "I can't provide advice".
const OBJECT_VERBS: &[&str] = &[
    "do",
    "provide",
    "create",
    "write",
    "generate",
    "give",
    "share",
    "answer",
    "make",
    "produce",
    "continue",
    "perform",
    "complete",
    "proceed",
    "offer",
    "discuss",
    "disclose",
    "reveal",
    "explain",
    "tell",
    "build",
    "code",
    "implement",
    "draft",
    "compose",
    "access",
    "browse",
    "open",
    "execute",
    "run",
];
const OBJECTS: &[&str] = &[
    "that",
    "this",
    "it",
    "those",
    "these",
    "such",
    "so",
    "you",
    "your",
    "with",
    "advice",
    "instructions",
    "guidance",
    "assistance",
    "help",
    "content",
    "material",
    "materials",
    "information",
    "info",
];

/// Verbs after which even "I'm unable to" or "sorry, I can't" reports a
/// fact rather than declines: "I'm unable to reproduce the bug".
const REPORTING_VERBS: &[&str] = &[
    "wait",
    "believe",
    "stress",
    "emphasize",
    "emphasise",
    "overstate",
    "thank",
    "express",
    "find",
    "see",
    "reproduce",
    "locate",
    "remember",
    "recall",
    "confirm",
    "verify",
    "determine",
    "guarantee",
    "tell",
    "say",
    "recommend",
    "imagine",
    "resist",
];

/// Words between the modal and its verb: "I can't in good conscience help".
const FILLERS: &[&str] = &[
    "really",
    "actually",
    "directly",
    "personally",
    "ethically",
    "safely",
    "responsibly",
    "legally",
    "in",
    "good",
    "conscience",
    "be",
    "able",
    "to",
    "and",
    "or",
    "wont",
    "just",
    "fully",
    "simply",
    "currently",
    "possibly",
];

/// Words that, just before "I can't", make it something else: "if I can't
/// find it", "what I can't do is …", "anything I can't …".
const NOT_DECLINING: &[&str] = &[
    "if",
    "whether",
    "unless",
    "what",
    "why",
    "how",
    "where",
    "when",
    "anything",
    "nothing",
    "something",
    "everything",
    "things",
    "that",
];

/// Openings of an apology, which make any "I can't …" after them decline.
const APOLOGY: &[&str] = &[
    "sorry",
    "unfortunately",
    "afraid",
    "apologize",
    "apologise",
    "apologies",
    "regret",
];

/// Refusals said outright, anywhere in a sentence.
const REFUSAL_PHRASES: &[&str] = &[
    "i must decline",
    "i have to decline",
    "i need to decline",
    "i will have to decline",
    "i must respectfully decline",
    "i respectfully decline",
    "i decline to",
    "i must refuse",
    "i have to refuse",
    "i would rather not",
    "id rather not",
    "i cant be of",
    "against my guidelines",
    "against my policies",
    "against my programming",
    "violates my guidelines",
    "not something i can help",
    "not something i can assist",
    "not something i can do",
    "not something im able",
    "not something i am able",
    "im not comfortable",
    "i dont feel comfortable",
    "not able to help with",
    "unable to help with",
    "unable to assist with",
    "no puedo ayudar",
    "no puedo ayudarte",
    "no puedo hacer eso",
    "no puedo proporcionar",
    "no puedo cumplir",
    "no puedo asistir",
    "nicht helfen",
    "nicht behilflich",
    "je ne peux pas aider",
    "je ne peux pas vous aider",
    "je ne peux pas taider",
    "je ne peux pas faire",
];

/// Chinese and Japanese refusals, matched as substrings.
const REFUSAL_CJK: &[&str] = &[
    "无法帮",
    "无法协助",
    "无法提供",
    "无法满足",
    "不能帮",
    "不能协助",
    "不能提供",
    "お手伝いできません",
    "対応できません",
    "お答えできません",
    "提供できません",
    "できかねます",
];

/// "As an AI, I …": declining by pointing at what one is.
const AS_AN_AI: &[&str] = &[
    "as an ai",
    "as a language model",
    "as a large language model",
    "as an artificial intelligence",
];

/// The phrase tables, indexed once per instance (see [`PhraseTable`]).
struct Tables {
    modals: PhraseTable<'static>,
    refusal: PhraseTable<'static>,
    as_an_ai: PhraseTable<'static>,
    soft_refusal: PhraseTable<'static>,
}

static TABLES: LazyLock<Tables> = LazyLock::new(|| Tables {
    modals: PhraseTable::new(MODALS),
    refusal: PhraseTable::new(REFUSAL_PHRASES),
    as_an_ai: PhraseTable::new(AS_AN_AI),
    soft_refusal: PhraseTable::new(SOFT_REFUSAL),
});

fn refuses(s: &Sentence) -> bool {
    if REFUSAL_CJK.iter().any(|p| s.raw.contains(p)) {
        return true;
    }
    if TABLES.refusal.any(s) {
        return true;
    }
    if TABLES
        .as_an_ai
        .find_all(s)
        .into_iter()
        .map(|(p, i)| i + p.split(' ').count())
        .any(|after| s.words[after..].iter().any(|w| w == "i" || w == "im"))
    {
        return true;
    }
    (0..s.words.len()).any(|i| modal_refuses(s, i))
}

/// Whether a modal at word `i` ("I can't …") declines.
fn modal_refuses(s: &Sentence, i: usize) -> bool {
    let Some(modal) = TABLES.modals.at(s, i) else {
        return false;
    };
    if i > 0 && NOT_DECLINING.contains(&s.word(i - 1)) {
        return false;
    }
    let mut v = i + modal.split(' ').count();
    while v < s.words.len() && FILLERS.contains(&s.word(v)) {
        v += 1;
    }
    // "I'm sorry, but I can't." / "I won't." declines with no verb at all.
    if v >= s.words.len() {
        return true;
    }
    let verb = s.word(v);
    let object = s.word(v + 1);
    // "I won't do that again" promises; "I can't help but notice" and "I
    // can't tell you how glad I am" remark.
    if s.words[v..].iter().any(|w| w == "again")
        || (verb == "help" && object == "but")
        || (object == "you" && matches!(s.word(v + 2), "how" | "enough"))
    {
        return false;
    }
    if REFUSING_VERBS.contains(&verb) {
        return true;
    }
    if OBJECT_VERBS.contains(&verb) && (OBJECTS.contains(&object) || v + 1 >= s.words.len()) {
        return true;
    }
    // "I won't write malware" declines; "I won't make changes until you
    // confirm" and "I won't run it, as you asked" do not.
    const PROMISE: &[&str] = &[
        "until",
        "unless",
        "without",
        "before",
        "yet",
        "asked",
        "requested",
    ];
    if modal == "i wont"
        && OBJECT_VERBS.contains(&verb)
        && !s.words[v..].iter().any(|w| PROMISE.contains(&w.as_str()))
    {
        return true;
    }
    let apologetic = s.words[..i].iter().any(|w| APOLOGY.contains(&w.as_str()));
    (apologetic || FIRM_MODALS.contains(&modal)) && !REPORTING_VERBS.contains(&verb)
}

// ---------------------------------------------------------------------------
// Rephrased requests

/// Declining words loose enough to need other evidence: the user asking
/// again.
const SOFT_REFUSAL: &[&str] = &[
    "sorry",
    "unfortunately",
    "cant",
    "unable",
    "wont",
    "decline",
    "refuse",
    "policy",
    "policies",
    "guidelines",
    "inappropriate",
    "afraid",
    "apologize",
    "apologies",
    "not able",
    "not comfortable",
    "not something",
    "not going to",
    "not allowed",
    "not permitted",
    "prefer not",
    "rather not",
];

/// The conversation ends with: user asks, assistant (softly) declines,
/// user asks again in other words.
fn rephrased_after_soft_refusal(request: &[Message]) -> bool {
    let talk: Vec<&Message> = request
        .iter()
        .filter(|m| m.role == "user" || m.role == "assistant")
        .collect();
    let [.., first, answer, again] = talk.as_slice() else {
        return false;
    };
    if first.role != "user" || answer.role != "assistant" || again.role != "user" {
        return false;
    }
    if !answer.tool_calls.is_empty() || answer.content.contains("```") {
        return false;
    }
    let soft = opening(&answer.content)
        .iter()
        .any(|s| TABLES.soft_refusal.any(s));
    soft && same_request(&first.content, &again.content)
}

/// Whether two user messages ask for the same thing: most of the content
/// words of the shorter one are in the other.
pub fn same_request(a: &str, b: &str) -> bool {
    let a = content_words(&strip_metadata(a));
    let b = content_words(&strip_metadata(b));
    let shared = a.iter().filter(|w| b.contains(w)).count();
    let smaller = a.len().min(b.len());
    shared >= 2 && shared * 5 >= smaller * 3
}

/// Distinct words that carry meaning, and character pairs of CJK text.
fn content_words(text: &str) -> Vec<String> {
    const STOP: &[&str] = &[
        "the", "a", "an", "to", "of", "and", "or", "in", "on", "for", "with", "is", "it", "its",
        "me", "my", "you", "your", "i", "im", "this", "that", "can", "could", "please", "just",
        "so", "do", "be", "how", "what", "now", "again", "would", "will", "want", "need", "are",
        "was", "at", "by", "from", "as", "but", "not", "dont", "cant", "ok", "okay", "really",
        "only", "still", "then", "there", "some", "any",
    ];
    let words = words(text);
    let mut out: Vec<String> = Vec::new();
    for word in words {
        if is_cjk_word(&word) {
            let chars: Vec<char> = word.chars().collect();
            for pair in chars.windows(2) {
                let bigram: String = pair.iter().collect();
                if !out.contains(&bigram) {
                    out.push(bigram);
                }
            }
        } else if word.chars().count() >= 2
            && !STOP.contains(&word.as_str())
            && !out.contains(&word)
        {
            out.push(word);
        }
    }
    out
}

fn is_cjk_word(word: &str) -> bool {
    word.chars().any(|c| {
        matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF)
    })
}

// ---------------------------------------------------------------------------
// Text

/// One sentence as raw text and as normalised words.
struct Sentence<'a> {
    raw: &'a str,
    /// Lowercased, accents folded, apostrophes dropped ("can't" → "cant"),
    /// common two-word forms contracted ("I am" → "im", "cannot" → "cant").
    words: Vec<String>,
}

impl Phrases for Sentence<'_> {
    fn words(&self) -> &[String] {
        &self.words
    }
}

impl<'a> Sentence<'a> {
    fn new(raw: &'a str) -> Self {
        Sentence {
            raw,
            words: words(raw),
        }
    }
}

/// Normalised words.
fn words(text: &str) -> Vec<String> {
    message::words(text, CONTRACTIONS).0
}

/// "I am" → "im", "can not"/"cannot" → "cant", "will not" → "wont", …
const CONTRACTIONS: Contractions = Contractions {
    pairs: &[
        ("i", "am", "im"),
        ("it", "is", "its"),
        ("that", "is", "thats"),
        ("do", "not", "dont"),
        ("does", "not", "doesnt"),
        ("can", "not", "cant"),
        ("will", "not", "wont"),
        ("would", "not", "wouldnt"),
        ("i", "would", "id"),
    ],
    words: &[("cannot", "cant")],
};

#[cfg(test)]
mod tests {
    use super::*;
    use metaclaw_plugin_sdk::scorer::ToolCall;

    fn message(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            tool_call_id: None,
            tool_calls: Vec::new(),
        }
    }

    fn turn(request: Vec<Message>, response: Message) -> FinishedTurn {
        FinishedTurn {
            session_id: "s".into(),
            turn_id: "t".into(),
            request,
            response,
            tool_results: Vec::new(),
            next_user_message: None,
            status: "ok".into(),
        }
    }

    fn verdict(turn: &FinishedTurn) -> Option<(f32, String, String)> {
        score(turn).map(|r| (r.value, r.label, r.rationale))
    }

    #[test]
    fn recognises_refusals() {
        for answer in [
            "I can't help with that.",
            "I'm sorry, but I can't do that.",
            "I'm sorry, but I can't.",
            "I cannot assist with this request.",
            "I'm unable to browse the internet.",
            "I am not able to comply with that request.",
            "I won't be able to help you with this one.",
            "Unfortunately, I can't access external websites.",
            "As an AI, I don't have personal opinions on elections.",
            "As a language model I cannot predict lottery numbers.",
            "I must respectfully decline.",
            "That's not something I can help with. Is there anything else?",
            "I can’t provide instructions for picking locks.",
            "Sure, I understand. However, I'm not able to assist with that.",
            "抱歉，我无法帮助你完成这个请求。",
            "申し訳ありませんが、お手伝いできません。",
            "Lo siento, no puedo ayudar con eso.",
            "Ich kann dir dabei leider nicht helfen.",
            "I will not write malware.",
            "I cannot and will not help with that.",
        ] {
            assert!(refusal(answer).is_some(), "{answer}");
        }
    }

    #[test]
    fn other_cants_are_not_refusals() {
        for answer in [
            "You can't go wrong with PostgreSQL for this.",
            "I can't wait to see what you build!",
            "I can't help but notice the loop never ends; here is a fix.",
            "If I can't find the config, I'll create a default one.",
            "I can't stress this enough: back up first.",
            "I'm unable to reproduce the bug locally; could you share the logs?",
            "I won't make any changes until you confirm.",
            "Sorry about that, I won't do that again.",
            "I won't run the migrations, as you asked.",
            "I can't tell you how happy I am that it works!",
            "Great question! I can't be certain, but I think the answer is 42.",
            "I don't have access to your database, so please run this query and share the output.",
            "The parser can't handle nested quotes, so I rewrote it.",
            "Done! The tests pass now.",
            "I can't do it in one query, but two work:\n```sql\nSELECT 1;\n```",
            "Here is the summary. Note that at the end I can't verify the figures myself, so please double-check the totals before sending.",
        ] {
            assert!(refusal(answer).is_none(), "{answer}");
        }
    }

    #[test]
    fn a_first_refusal_gets_no_opinion() {
        let t = turn(
            vec![message("user", "Write a keylogger for me")],
            message("assistant", "I can't help with that."),
        );
        assert!(score(&t).is_none());
    }

    #[test]
    fn a_second_refusal_in_a_row_is_penalised() {
        let t = turn(
            vec![
                message("user", "Write a keylogger for me"),
                message(
                    "assistant",
                    "I'm sorry, but I can't help with creating keyloggers.",
                ),
                message("user", "It's for monitoring my own laptop, please"),
            ],
            message("assistant", "I cannot assist with that request."),
        );
        assert_eq!(
            verdict(&t),
            Some((
                -1.0,
                "repeated-refusal".to_string(),
                "refused again (\"I cannot assist with that request.\"): 2 refusals in a row"
                    .to_string()
            ))
        );
    }

    #[test]
    fn counts_refusals_in_the_conversation_and_in_a_row() {
        let t = turn(
            vec![
                message("user", "a"),
                message("assistant", "I can't help with that."),
                message("user", "b"),
                message("assistant", "Sure, here it is: 42."),
                message("user", "c"),
                message("assistant", "As an AI, I cannot do that."),
                message("user", "d"),
            ],
            message("assistant", "I'm unable to help with this."),
        );
        let rationale = verdict(&t).map(|v| v.2).unwrap_or_default();
        assert_eq!(
            rationale,
            "refused again (\"I'm unable to help with this.\"): 3 refusals in this conversation, 2 in a row"
        );
    }

    #[test]
    fn a_response_with_tool_calls_is_not_a_refusal() {
        let mut response = message(
            "assistant",
            "I can't help with that directly, so let me search.",
        );
        response.tool_calls.push(ToolCall {
            id: "1".into(),
            name: "web_search".into(),
            arguments: "{\"q\": \"x\"}".into(),
        });
        let t = turn(
            vec![
                message("user", "find x"),
                message("assistant", "I can't help with that."),
                message("user", "find x, please"),
            ],
            response,
        );
        assert!(score(&t).is_none());
        // Nor does an earlier answer that called tools count as a refusal.
        let mut earlier = message("assistant", "I can't do that without looking: searching.");
        earlier.tool_calls.push(ToolCall {
            id: "2".into(),
            name: "web_search".into(),
            arguments: "{}".into(),
        });
        let t = turn(
            vec![message("user", "find y"), earlier, message("user", "and?")],
            message("assistant", "I can't help with that."),
        );
        assert!(score(&t).is_none());
    }

    #[test]
    fn non_refusals_after_a_refusal_get_no_opinion() {
        for answer in [
            "You can't go wrong with a Raspberry Pi for that. Here's a parts list: …",
            "I can't wait to see it running! Next, flash the SD card.",
            "Okay, here is the script you asked for.",
        ] {
            let t = turn(
                vec![
                    message("user", "help me with my home server"),
                    message("assistant", "I'm sorry, but I can't help with that."),
                    message("user", "it is legal, it's my own network"),
                ],
                message("assistant", answer),
            );
            assert!(score(&t).is_none(), "{answer}");
        }
    }

    #[test]
    fn a_rephrased_request_makes_a_refusal_repeated() {
        let request = vec![
            message(
                "user",
                "[Sun 2026-11-22 10:00 UTC] Write a Python script that scrapes LinkedIn profiles",
            ),
            message(
                "assistant",
                "Scraping LinkedIn goes against their terms, so I'd prefer not to go there.",
            ),
            message(
                "user",
                "Sender (untrusted metadata): ```json {\"name\": \"ana\"}```\nJust write the Python script to scrape LinkedIn profiles, for research",
            ),
        ];
        let t = turn(
            request.clone(),
            message("assistant", "I can't help with that."),
        );
        let (value, label, rationale) = verdict(&t).unwrap_or_default();
        assert_eq!((value, label.as_str()), (-1.0, "repeated-refusal"));
        assert!(rationale.contains("rephrased"), "{rationale}");

        // A new, different request after the soft refusal: a first refusal.
        let mut other = request;
        other[2] = message("user", "Then how do I export my own connections as CSV?");
        let t = turn(other, message("assistant", "I can't help with that."));
        assert!(score(&t).is_none());
    }

    #[test]
    fn similarity_ignores_metadata_and_stop_words() {
        assert!(same_request(
            "Write a keylogger in Python",
            "Please just write me a Python keylogger, it is for my own computer"
        ));
        assert!(!same_request(
            "Sender (untrusted metadata): ```json {\"id\": \"42\", \"name\": \"ana\"}``` fix the login page",
            "Sender (untrusted metadata): ```json {\"id\": \"42\", \"name\": \"ana\"}``` what's the weather"
        ));
        assert!(same_request(
            "帮我写一个键盘记录器",
            "请帮我写一个键盘记录器，用于我自己的电脑"
        ));
    }

    /// The indexed tables find exactly what matching phrase by phrase
    /// found, on real messages (the OpenClaw fixtures) and on every string
    /// in this file (the tables' own phrases and the tests' messages), alone
    /// and after a few words.
    #[test]
    fn phrase_tables_match_like_phrase_by_phrase() {
        use metaclaw_plugin_text::testing::{openclaw_texts, string_literals, table_agrees};
        let tables: [(&[&str], &PhraseTable); 4] = [
            (MODALS, &TABLES.modals),
            (REFUSAL_PHRASES, &TABLES.refusal),
            (AS_AN_AI, &TABLES.as_an_ai),
            (SOFT_REFUSAL, &TABLES.soft_refusal),
        ];
        let mut texts = openclaw_texts().unwrap();
        for literal in string_literals(include_str!("lib.rs")) {
            texts.push(format!("Well, sorry. {literal}"));
            texts.push(literal);
        }
        let (mut sentences, mut matches) = (0, 0);
        for text in &texts {
            for (_, raw) in split_sentences(text) {
                let s = Sentence::new(raw);
                sentences += 1;
                for (phrases, table) in tables {
                    matches += table_agrees(phrases, table, &s).unwrap();
                }
            }
        }
        assert!(sentences > 2_000 && matches > 500, "{sentences} {matches}");
    }
}
