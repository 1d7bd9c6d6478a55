//! Loading, validating and editing `config.yaml`.
//!
//! The file is read into a generic YAML tree first and then into the typed
//! [`Config`], so that (a) unknown keys can be reported by their dotted path
//! as warnings, (b) a wrong type is a fatal error naming the key path and the
//! type it needed, and (c) `config set` can edit the tree without dropping
//! keys it does not know (the original's wizard erased them).
//!
//! Values the code acts on are typed when the file is read (modes and
//! formats as enums, plugin specs and grants, allowed hosts and origins), so
//! the modules above use them as they are. Config depends on nothing above
//! it: it imports only the leaf `crate::home`.
//!
//! - `schema`: the types and their defaults (`compat`: the original's
//!   sections); `duration`, `presets`, `plugin_refs` and `hosts`: typed
//!   values.
//! - `load`: file and environment to a validated config, with warnings;
//!   `validate`: what the types cannot check.
//! - `keys`: the known keys and suggestions; `inert`: the keys accepted that
//!   do nothing in this version.
//! - `show`: the effective, masked tree; `edit`: `config set` and `setup`.

/// Serde for a type that is written in the file as text: its `Display`
/// out, its `FromStr` in (the parse error names what is wrong, and the
/// loader adds the key).
macro_rules! serde_as_text {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
use serde_as_text;

pub mod compat;
pub mod duration;
mod edit;
pub mod hosts;
pub mod inert;
mod keys;
mod load;
pub mod plugin_refs;
pub mod presets;
pub mod schema;
mod show;
mod validate;

use std::path::PathBuf;

pub use compat::*;
pub use edit::{set_key, set_many, to_yaml};
pub use hosts::{HostEntry, HostName, Origin, parse_authority, parse_host, parse_origin};
pub use keys::{get_path, known_keys};
pub use load::{
    LoadedConfig, effective_api_base, load, load_warned, load_with_env, parse_raw, parse_tree,
    read_raw,
};
pub use plugin_refs::{FilePin, FileRef, Grants, PluginSpec};
pub use schema::*;
pub use show::{annotate, effective_tree, masked_tree};
pub use validate::validate;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid YAML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("{path}: the top level must be a mapping of keys (like `llm:`), not {found}")]
    NotAMapping { path: PathBuf, found: &'static str },
    #[error("{path}: `{key}`: {message}")]
    Type {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("`{key}`: {message}")]
    Invalid { key: String, message: String },
    #[error("unknown config key `{key}`{hint}")]
    UnknownKey { key: String, hint: String },
    #[error("cannot write {path}: {message}")]
    Write { path: PathBuf, message: String },
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let p = dir.path().join("config.yaml");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// `agents.<id>`: its mode and its run's `rl` keys over the top
    /// level's; what it cannot set is refused with the key named.
    #[test]
    fn an_agent_gets_its_own_mode_and_rl_keys_over_the_top_levels() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "mode: skills_only\nrl:\n  lora_rank: 16\n  learning_rate: 0.001\nagents:\n  a:\n    mode: rl\n    rl:\n      lora_rank: 4\n  b:\n    rl:\n      batch_size: 2\n",
        );
        let config = load(&p).unwrap().config;
        let a = config.for_agent("a").unwrap().unwrap();
        assert_eq!(
            (a.mode.clone(), a.rl.lora_rank, a.rl.learning_rate),
            (Mode::Rl, 4, 0.001)
        );
        assert!(a.serves_student());
        let b = config.for_agent("b").unwrap().unwrap();
        assert_eq!((b.mode.clone(), b.rl.batch_size), (Mode::SkillsOnly, 2));
        assert!(!b.serves_student());
        assert_eq!(config.for_agent("c").unwrap(), None);
        // The original's rl.enabled serves an agent that sets no mode.
        let p = write(
            &dir,
            "rl:\n  enabled: true\nagents:\n  a:\n    rl:\n      lora_rank: 4\n",
        );
        assert!(
            load(&p)
                .unwrap()
                .config
                .for_agent("a")
                .unwrap()
                .unwrap()
                .serves_student()
        );
        for (text, says) in [
            (
                "agents:\n  a:\n    rl:\n      tinker_api_key: k\n",
                "agents.a.rl.tinker_api_key",
            ),
            (
                "agents:\n  a:\n    rl:\n      lora_rnak: 4\n",
                "agents.a.rl.lora_rnak",
            ),
            (
                "agents:\n  a:\n    rl:\n      lora_rank: four\n",
                "agents.a.rl",
            ),
            ("agents:\n  A:\n    mode: rl\n", "write `a`"),
            ("agents:\n  'a b':\n    mode: rl\n", "not valid"),
        ] {
            let e = load(&write(&dir, text)).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn missing_and_empty_files_give_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = load(&dir.path().join("nope.yaml")).unwrap();
        assert!(!loaded.file_exists);
        assert_eq!(loaded.config.proxy.port, 30000);
        assert_eq!(loaded.config.proxy.host, "127.0.0.1");
        assert_eq!(loaded.config.max_context_tokens, 50_000);
        let p = write(&dir, "\n");
        assert_eq!(load(&p).unwrap().config, Config::default());
    }

    #[test]
    fn accepts_an_original_metaclaw_config() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            r#"
claw_type: openclaw
mode: madmax
llm:
  provider: qwen
  model_id: qwen-plus
  api_base: ''
  api_key: sk-test-123
  bedrock_region: ''
openrouter: {}
proxy:
  port: 30001
  host: 0.0.0.0
  api_key: local-token-1234
skills:
  enabled: true
  dir: ~/.metaclaw/skills
  retrieval_mode: template
  top_k: 6
  task_specific_top_k: 10
  auto_evolve: true
rl:
  enabled: true
  backend: auto
  model: Qwen/Qwen3-4B
  prm_url: https://api.openai.com/v1
  prm_model: gpt-5.2
  lora_rank: 32
  batch_size: 4
  resume_from_ckpt: ''
scheduler:
  enabled: false
  calendar: {enabled: false}
memory:
  enabled: false
  retrieval_mode: hybrid
max_context_tokens: 60000
"#,
        );
        let loaded = load_with_env(&p, &|_| None).unwrap();
        // It loads; what it asks for that metaclaw does not do is said, key
        // by key.
        let mut inert: Vec<&str> = loaded
            .warnings
            .iter()
            .filter_map(|w| w.strip_prefix('`')?.split('`').next())
            .collect();
        inert.sort_unstable();
        assert_eq!(
            inert,
            ["memory.retrieval_mode", "rl.backend"],
            "{:?}",
            loaded.warnings
        );
        assert_eq!(loaded.config.mode, Mode::Auto);
        assert_eq!(loaded.config.proxy.port, 30001);
        assert_eq!(
            loaded.api_base(),
            "https://dashscope.aliyuncs.com/compatible-mode/v1"
        );
        assert_eq!(loaded.config.max_context_tokens, 60_000);
    }

    #[test]
    fn an_evolver_chain_without_guard_is_a_warning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        let warned = |text: &str| {
            std::fs::write(&path, text).unwrap();
            let loaded = load_with_env(&path, &|_| None).unwrap();
            loaded
                .warnings
                .iter()
                .any(|w| w.starts_with("plugins.evolvers does not list guard"))
        };
        assert!(warned("plugins:\n  evolvers: [redact, dedup]\n"));
        assert!(warned("plugins:\n  evolvers: []\n"));
        assert!(!warned("plugins:\n  evolvers: [\"guard@^0.1\", dedup]\n"));
        assert!(!warned("{}\n"));
        assert!(!warned(
            "plugins:\n  evolvers: [dedup]\nlearning:\n  enabled: false\n"
        ));
    }

    #[test]
    fn unknown_keys_are_warnings_that_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "proxy:\n  prot: 1\nfrobnicate: true\n");
        let loaded = load(&p).unwrap();
        let text = loaded.warnings.join("\n");
        assert!(text.contains("`proxy.prot`"), "{text}");
        assert!(text.contains("did you mean `proxy.port`"), "{text}");
        assert!(text.contains("`frobnicate`"), "{text}");
    }

    #[test]
    fn wrong_types_are_fatal_and_name_the_path_and_type() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "proxy:\n  port: lots\n");
        let err = load(&p).unwrap_err().to_string();
        assert!(err.contains("`proxy.port`"), "{err}");
        assert!(err.contains("u16"), "{err}");
        let p = write(&dir, "sessions:\n  idle_timeout: soon\n");
        let err = load(&p).unwrap_err().to_string();
        assert!(err.contains("`sessions.idle_timeout`"), "{err}");
        let p = write(&dir, "mode: turbo\n");
        let err = load(&p).unwrap_err().to_string();
        assert!(
            err.contains("`mode`") && err.contains("skills_only"),
            "{err}"
        );
    }

    #[test]
    fn bad_yaml_and_bad_values_are_clear() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, "llm: [1,\n");
        assert!(load(&p).unwrap_err().to_string().contains("not valid YAML"));
        let p = write(&dir, "- a\n- b\n");
        assert!(load(&p).unwrap_err().to_string().contains("mapping"));
        let p = write(&dir, "llm:\n  api_base: ftp://x\n");
        assert!(load(&p).unwrap_err().to_string().contains("llm.api_base"));
    }

    #[test]
    fn retrieval_settings_are_checked_and_the_originals_mode_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        for (yaml, key, hint) in [
            (
                "skills:\n  retrieval_mode: vector\n",
                "skills.retrieval_mode",
                "bm25",
            ),
            (
                "skills:\n  embedding_backend: torch\n",
                "skills.embedding_backend",
                "openai",
            ),
            (
                "skills:\n  embedding_api_base: localhost:8080\n",
                "skills.embedding_api_base",
                "http",
            ),
        ] {
            let err = format!("{:#}", load(&write(&dir, yaml)).unwrap_err());
            assert!(err.contains(key) && err.contains(hint), "{yaml}: {err}");
        }
        let ok = write(
            &dir,
            "skills:\n  retrieval_mode: template\n  embedding_backend: openai\n  embedding_api_base: http://127.0.0.1:9/v1\n  embedding_api_key: sk-embed-12345\n",
        );
        let loaded = load(&ok).unwrap();
        assert_eq!(loaded.config.skills.retrieval_mode, RetrievalMode::Template);
        // The embedding key is a secret like the others.
        let yaml = to_yaml(&masked_tree(&loaded));
        assert!(!yaml.contains("sk-embed-12345"), "{yaml}");
        let env =
            |var: &str| (var == "METACLAW_EMBEDDING_API_KEY").then(|| "sk-env-777".to_string());
        let loaded =
            load_with_env(&write(&dir, "skills:\n  embedding_backend: openai\n"), &env).unwrap();
        assert_eq!(
            loaded.config.skills.embedding_api_key.as_deref(),
            Some("sk-env-777")
        );
    }

    #[test]
    fn plugin_entries_are_typed_at_load_and_bad_ones_name_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let sha = "ab".repeat(32);
        for (yaml, key, hint) in [
            (
                "plugins:\n  retriever: ['@1']\n".to_string(),
                "plugins.retriever[0]",
                "a plugin name is required",
            ),
            (
                "plugins:\n  evolvers: [guard, 'dedup@not-a-req']\n".into(),
                "plugins.evolvers[1]",
                "tool-error@^0.1",
            ),
            (
                "plugins:\n  grants:\n    notes: [root]\n".into(),
                "plugins.grants.notes",
                "unknown capability",
            ),
            (
                "plugins:\n  grants:\n    'notes@md5:1': [kv]\n".into(),
                "plugins.grants",
                "NAME@sha256:<hex>",
            ),
            (
                "plugins:\n  overrides: [guard]\n".into(),
                "plugins.overrides[0]",
                "a name alone is what any file can claim",
            ),
            (
                "learning:\n  reward:\n    combine: max\n".into(),
                "learning.reward.combine",
                "weighted",
            ),
        ] {
            let err = format!("{:#}", load(&write(&dir, &yaml)).unwrap_err());
            assert!(err.contains(key) && err.contains(hint), "{yaml}: {err}");
        }
        // What loads is typed, and written back (`config show`, `set`) it
        // loads again to the same config.
        let p = write(
            &dir,
            &format!(
                "plugins:\n  retriever: [embedding@^0.2, bm25]\n  evolvers: [guard]\n  grants:\n    \
                 notes: [clock, 'fs:/tmp/notes']\n    'mine@sha256:{}': [kv]\n  overrides: ['guard@sha256:{sha}']\n\
                 proxy:\n  allowed_hosts: [Gateway:8080, 'fd00::1']\n  allowed_origins: ['HTTP://LocalHost:3000/']\n\
                 skills:\n  retrieval_mode: embedding\n  embedding_backend: openai\n",
                sha.to_uppercase()
            ),
        );
        let config = load_with_env(&p, &|_| None).unwrap().config;
        let plugins = &config.plugins;
        assert_eq!(plugins.retriever[1], PluginSpec::any("bm25"));
        assert_eq!(plugins.overrides[0].sha256, sha);
        let mine: FileRef = format!("mine@sha256:{sha}").parse().unwrap();
        assert!(plugins.grants[&mine].kv);
        assert_eq!(
            config.proxy.allowed_origins[0].as_str(),
            "http://localhost:3000"
        );
        assert_eq!(config.proxy.allowed_hosts[0].to_string(), "gateway:8080");
        assert!(config.skills.embedding_retrieval());
        let tree = serde_json::to_value(&config).unwrap();
        let again = parse_tree(&parse_raw(&to_yaml(&tree), &p).unwrap(), &p)
            .unwrap()
            .0;
        assert_eq!(again, config);
    }

    #[test]
    fn allowed_hosts_origins_and_log_rotation_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        for (yaml, key, hint) in [
            (
                "proxy:\n  allowed_hosts: [ok.example, 'http://x']\n",
                "proxy.allowed_hosts[1]",
                "host.docker.internal",
            ),
            (
                "proxy:\n  allowed_origins: [localhost:3000]\n",
                "proxy.allowed_origins[0]",
                "http://localhost:3000",
            ),
            ("log:\n  max_mb: 0\n", "log.max_mb", "between 1"),
            ("log:\n  keep: 1000\n", "log.keep", "at most"),
        ] {
            let err = format!("{:#}", load(&write(&dir, yaml)).unwrap_err());
            assert!(err.contains(key) && err.contains(hint), "{yaml}: {err}");
        }
        let p = write(
            &dir,
            "proxy:\n  allowed_hosts: [host.docker.internal, 'gw:8080']\n  allowed_origins: ['http://localhost:3000']\nlog:\n  max_mb: 1\n  keep: 0\n",
        );
        let config = load(&p).unwrap().config;
        assert_eq!(config.proxy.allowed_hosts.len(), 2);
        assert_eq!((config.log.max_mb, config.log.keep), (1, 0));
        let defaults = Config::default();
        assert!(
            defaults.proxy.allowed_hosts.is_empty() && defaults.proxy.allowed_origins.is_empty()
        );
        assert_eq!((defaults.log.max_mb, defaults.log.keep), (16, 3));
    }

    #[test]
    fn set_validates_keeps_other_keys_and_never_coerces_strings() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "memory:\n  enabled: false\n  scope: team\ncustom_thing: 7\nllm:\n  model_id: a\n",
        );
        set_key(&p, "proxy.port", "30005").unwrap();
        set_key(&p, "llm.model_id", "1.5").unwrap();
        // Maps keyed by a plugin's name take any name.
        set_key(&p, "learning.reward.scorer_weights.tool-error", "0.5").unwrap();
        set_key(&p, "plugins.grants.notes", "[clock]").unwrap();
        let (tree, _) = read_raw(&p).unwrap();
        assert_eq!(get_path(&tree, "proxy.port"), Some(&Value::from(30005)));
        assert_eq!(get_path(&tree, "llm.model_id"), Some(&Value::from("1.5")));
        assert_eq!(get_path(&tree, "memory.scope"), Some(&Value::from("team")));
        assert_eq!(get_path(&tree, "custom_thing"), Some(&Value::from(7)));
        assert_eq!(
            get_path(&tree, "learning.reward.scorer_weights.tool-error"),
            Some(&Value::from(0.5))
        );
        let err = set_key(&p, "plugins.grants.notes", "[root]")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown capability"), "{err}");

        let err = set_key(&p, "proxy.port", "seventy")
            .unwrap_err()
            .to_string();
        assert!(err.contains("proxy.port"), "{err}");
        let err = set_key(&p, "proxy.prot", "1").unwrap_err().to_string();
        assert!(err.contains("did you mean `proxy.port`"), "{err}");
        let err = set_key(&p, "proxy", "1").unwrap_err().to_string();
        assert!(err.contains("section"), "{err}");
        // The failed sets changed nothing.
        let (after, _) = read_raw(&p).unwrap();
        assert_eq!(after, tree);
    }

    #[test]
    fn presets_and_defaults_show_their_effective_values() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "llm:\n  provider: openai\n  model_id: gpt-4o\nrl:\n  prm_model: judge-model\n",
        );
        let loaded = load_with_env(&p, &|_| None).unwrap();
        let (tree, origins) = effective_tree(&loaded);
        let yaml = annotate(&to_yaml(&tree), &origins);
        assert!(
            yaml.contains("  api_base: https://api.openai.com/v1  # preset openai\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("  evolver_model: gpt-4o  # default: llm.model_id\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("  prm_url: https://api.openai.com/v1  # default: llm.api_base\n"),
            "{yaml}"
        );
        // A value the file sets is shown as it is, unmarked.
        assert!(yaml.contains("  prm_model: judge-model\n"), "{yaml}");
        // Still YAML, with the effective values in it.
        let back: Value = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(back["llm"]["api_base"], "https://api.openai.com/v1");
        assert_eq!(back["memory"]["scope"], "default");
        // An explicit base wins over the preset, and is not marked.
        let p = write(
            &dir,
            "llm:\n  provider: openai\n  api_base: http://127.0.0.1:8000/v1\n",
        );
        let loaded = load_with_env(&p, &|_| None).unwrap();
        let (tree, origins) = effective_tree(&loaded);
        assert_eq!(tree["llm"]["api_base"], "http://127.0.0.1:8000/v1");
        assert!(
            origins.iter().all(|(k, _)| *k != "llm.api_base"),
            "{origins:?}"
        );
    }

    #[test]
    fn secrets_come_from_the_environment_and_are_masked() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "llm:\n  api_key_env: MY_UPSTREAM_KEY\nproxy:\n  api_key: file-token-1234\n",
        );
        let env = |var: &str| match var {
            "MY_UPSTREAM_KEY" => Some("sk-from-env-999".to_string()),
            "METACLAW_RL_PRM_API_KEY" => Some("sk-prm-888".to_string()),
            _ => None,
        };
        let loaded = load_with_env(&p, &env).unwrap();
        assert_eq!(
            loaded.config.llm.api_key.as_deref(),
            Some("sk-from-env-999")
        );
        assert_eq!(loaded.config.rl.prm_api_key.as_deref(), Some("sk-prm-888"));
        assert_eq!(
            loaded.config.proxy.api_key.as_deref(),
            Some("file-token-1234")
        );
        let yaml = to_yaml(&masked_tree(&loaded));
        for secret in ["sk-from-env-999", "sk-prm-888", "file-token-1234"] {
            assert!(!yaml.contains(secret), "{yaml}");
        }
        assert!(yaml.contains("$MY_UPSTREAM_KEY"), "{yaml}");
    }
}
