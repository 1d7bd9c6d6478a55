// refusals: a metaclaw scorer written in JavaScript.
//
// A refusal ("I can't help with that", "I'm sorry, but I cannot…") in the
// assistant's answer gets a negative reward; a refusal that repeats one the
// assistant already gave earlier in the conversation gets a stronger one.
// Everything else: no opinion.
//
// Built with jco's QuickJS backend (see docs/plugins.md):
//   jco componentize examples/js-refusals/app.js --wit wit -n scorer --backend quickjs -o refusals.wasm

const NAME = "refusals";
const VERSION = "0.1.0";

const REFUSAL = [
  /\bI(?:'m| am) (?:sorry|afraid),? but I (?:can(?:'|no)t|won't|am unable to|'m unable to)\b/i,
  /\bI (?:can(?:'|no)t|won't|am not able to|'m not able to|am unable to|'m unable to) (?:help|assist|do|comply|provide|complete) (?:with )?(?:that|this)\b/i,
  /\bI (?:must|have to) (?:decline|refuse)\b/i,
  /\b(?:as an AI|as a language model),? I (?:can(?:'|no)t|don't|do not)\b/i,
];

function refusal(text) {
  if (typeof text !== "string") return null;
  for (const pattern of REFUSAL) {
    const m = pattern.exec(text);
    if (m) return m[0];
  }
  return null;
}

export const plugin = {
  metadata() {
    return {
      name: NAME,
      version: VERSION,
      kind: "scorer",
      description: "Negative reward when the assistant refuses, stronger when it keeps refusing",
      capabilities: [],
    };
  },
};

export const scorerApi = {
  score(turn) {
    try {
      const said = refusal(turn.response.content);
      if (!said) return undefined;
      const earlier = turn.request.filter((m) => m.role === "assistant" && refusal(m.content)).length;
      if (earlier > 0) {
        return {
          value: -1.0,
          label: "repeated-refusal",
          rationale: `refused again ("${said}") after ${earlier} earlier refusal(s)`,
        };
      }
      return { value: -0.5, label: "refusal", rationale: `the answer refuses: "${said}"` };
    } catch (e) {
      // An uncaught exception would trap the call: no opinion instead.
      return undefined;
    }
  },
};
