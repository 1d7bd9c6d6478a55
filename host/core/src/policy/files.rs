//! Where the trainable model's tokenizer and chat template come from, in
//! order: `rl.tokenizer_path`; `rl.model` when it is a folder (a local
//! model, as skyrl takes); the local Hugging Face cache; metaclaw's own
//! download folder; a download from Hugging Face when
//! `rl.download_tokenizer` allows it. Anything else is an error that names
//! what is missing and how to provide it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use metaclaw_chat::render::ModelFiles;

use crate::http::{ClientSpec, Purpose};

/// What the lookup needs from the config and the environment.
pub struct Lookup<'a> {
    /// `rl.model` (after its fallback to `llm.model_id`).
    pub model: &'a str,
    /// `rl.tokenizer_path`, expanded; empty when unset.
    pub tokenizer_path: &'a str,
    pub download: bool,
    /// metaclaw's folder for downloaded files (`<home>/models`).
    pub download_dir: PathBuf,
    pub env: &'a (dyn Fn(&str) -> Option<String> + Sync),
}

/// Why the model's tokenizer files cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error(
        "rl.tokenizer_path {} lacks {}: point it at the folder of the model's tokenizer files",
        .dir.display(),
        .missing.join(" and ")
    )]
    TokenizerPathIncomplete {
        dir: PathBuf,
        missing: Vec<&'static str>,
    },
    #[error("the model folder {} (rl.model) lacks {}", .dir.display(), .missing.join(" and "))]
    ModelFolderIncomplete {
        dir: PathBuf,
        missing: Vec<&'static str>,
    },
    #[error(
        "no tokenizer files for {model} (tokenizer.json, tokenizer_config.json): not a folder, not in the Hugging Face cache, not in {}; set rl.tokenizer_path to the model's folder, or rl.download_tokenizer: true to fetch them from Hugging Face",
        .download_dir.display()
    )]
    NotFound {
        model: String,
        download_dir: PathBuf,
    },
    #[error(transparent)]
    Client(#[from] crate::http::ClientError),
    #[error("cannot create {}: {error}", .dir.display())]
    CannotCreate { dir: PathBuf, error: std::io::Error },
    #[error("cannot download {url}: {error}")]
    Download { url: String, error: reqwest::Error },
    #[error(
        "cannot download {url}: HTTP {status} (a gated model needs HF_TOKEN; or set rl.tokenizer_path)"
    )]
    DownloadStatus {
        url: String,
        status: reqwest::StatusCode,
    },
    #[error("cannot write {}: {error}", .path.display())]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Has the files a renderer needs.
fn complete(dir: &Path) -> bool {
    ModelFiles::REQUIRED.iter().all(|f| dir.join(f).is_file())
}

/// The folder holding the model's tokenizer files, without downloading.
pub fn find_local(lookup: &Lookup<'_>) -> Result<Option<PathBuf>, FilesError> {
    if !lookup.tokenizer_path.is_empty() {
        let dir = PathBuf::from(lookup.tokenizer_path);
        return match complete(&dir) {
            true => Ok(Some(dir)),
            false => Err(FilesError::TokenizerPathIncomplete {
                missing: missing(&dir),
                dir,
            }),
        };
    }
    let as_dir = Path::new(lookup.model);
    if as_dir.is_dir() {
        return match complete(as_dir) {
            true => Ok(Some(as_dir.to_path_buf())),
            false => Err(FilesError::ModelFolderIncomplete {
                dir: as_dir.to_path_buf(),
                missing: missing(as_dir),
            }),
        };
    }
    if let Some(dir) = hf_cache_snapshot(lookup) {
        return Ok(Some(dir));
    }
    let own = lookup.download_dir.join(folder_name(lookup.model));
    Ok(complete(&own).then_some(own))
}

fn missing(dir: &Path) -> Vec<&'static str> {
    ModelFiles::REQUIRED
        .iter()
        .copied()
        .filter(|f| !dir.join(f).is_file())
        .collect()
}

/// `org/name` → `org--name` (the hub cache's and our own folder names).
fn folder_name(model: &str) -> String {
    model.replace('/', "--")
}

/// The hub cache: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
/// `~/.cache/huggingface/hub`; then `models--org--name/snapshots/<rev>`,
/// the revision `refs/main` names, else any complete snapshot.
fn hf_cache_snapshot(lookup: &Lookup<'_>) -> Option<PathBuf> {
    let env = lookup.env;
    let hub = env("HF_HUB_CACHE")
        .map(PathBuf::from)
        .or_else(|| env("HF_HOME").map(|h| PathBuf::from(h).join("hub")))
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".cache/huggingface/hub")))?;
    let repo = hub.join(format!("models--{}", folder_name(lookup.model)));
    let snapshots = repo.join("snapshots");
    if let Ok(rev) = std::fs::read_to_string(repo.join("refs/main")) {
        let dir = snapshots.join(rev.trim());
        if complete(&dir) {
            return Some(dir);
        }
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&snapshots)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| complete(p))
        .collect();
    dirs.sort();
    dirs.pop()
}

/// The folder with the model's tokenizer files: found locally, or
/// downloaded into `download_dir` when allowed.
pub async fn locate(lookup: &Lookup<'_>) -> Result<PathBuf, FilesError> {
    if let Some(dir) = find_local(lookup)? {
        return Ok(dir);
    }
    if !lookup.download {
        return Err(FilesError::NotFound {
            model: lookup.model.to_string(),
            download_dir: lookup.download_dir.clone(),
        });
    }
    download(lookup).await
}

/// Fetches the files from the hub (`$HF_ENDPOINT`, default
/// `https://huggingface.co`) into `download_dir/org--name`, each written
/// whole before it is renamed into place.
async fn download(lookup: &Lookup<'_>) -> Result<PathBuf, FilesError> {
    let endpoint = (lookup.env)("HF_ENDPOINT")
        .unwrap_or_else(|| "https://huggingface.co".into())
        .trim_end_matches('/')
        .to_string();
    let client = ClientSpec::new(Purpose::Training)
        .connect_timeout(Duration::from_secs(10))
        .build()?;
    let dir = lookup.download_dir.join(folder_name(lookup.model));
    std::fs::create_dir_all(&dir).map_err(|error| FilesError::CannotCreate {
        dir: dir.clone(),
        error,
    })?;
    let token = (lookup.env)("HF_TOKEN");
    let files = ModelFiles::REQUIRED
        .iter()
        .map(|f| (*f, true))
        .chain(ModelFiles::OPTIONAL.iter().map(|f| (*f, false)));
    for (file, required) in files {
        let url = format!("{endpoint}/{}/resolve/main/{file}", lookup.model);
        let mut request = client.get(&url).timeout(Duration::from_secs(120));
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => return Err(FilesError::Download { url, error }),
        };
        if !response.status().is_success() {
            if required {
                return Err(FilesError::DownloadStatus {
                    url,
                    status: response.status(),
                });
            }
            continue;
        }
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(error) => return Err(FilesError::Download { url, error }),
        };
        let part = dir.join(format!("{file}.part"));
        std::fs::write(&part, &bytes)
            .and_then(|()| std::fs::rename(&part, dir.join(file)))
            .map_err(|error| FilesError::Write {
                path: dir.join(file),
                error,
            })?;
    }
    tracing::info!(model = lookup.model, dir = %dir.display(), "tokenizer files downloaded");
    Ok(dir)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn write_files(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        for f in ModelFiles::REQUIRED {
            std::fs::write(dir.join(f), "{}").unwrap();
        }
    }

    fn lookup<'a>(
        model: &'a str,
        tokenizer_path: &'a str,
        tmp: &Path,
        env: &'a (dyn Fn(&str) -> Option<String> + Sync),
    ) -> Lookup<'a> {
        Lookup {
            model,
            tokenizer_path,
            download: false,
            download_dir: tmp.join("models"),
            env,
        }
    }

    #[test]
    fn files_are_found_in_the_configured_folder_the_model_folder_and_the_hub_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let no_env = |_: &str| None;
        // rl.tokenizer_path, and it must be complete.
        let own = tmp.path().join("own");
        write_files(&own);
        let dir = own.to_str().unwrap();
        assert_eq!(
            find_local(&lookup("Qwen/Qwen3-4B", dir, tmp.path(), &no_env)).unwrap(),
            Some(own.clone())
        );
        std::fs::remove_file(own.join("tokenizer_config.json")).unwrap();
        let e = find_local(&lookup("Qwen/Qwen3-4B", dir, tmp.path(), &no_env))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tokenizer_config.json") && e.contains("rl.tokenizer_path"),
            "{e}"
        );
        // rl.model as a folder.
        let model_dir = tmp.path().join("tiny");
        write_files(&model_dir);
        let model = model_dir.to_str().unwrap();
        assert_eq!(
            find_local(&lookup(model, "", tmp.path(), &no_env)).unwrap(),
            Some(model_dir)
        );
        // The hub cache, at the revision refs/main names.
        let hub = tmp.path().join("hub");
        let repo = hub.join("models--Qwen--Qwen3-4B");
        write_files(&repo.join("snapshots/aaa"));
        write_files(&repo.join("snapshots/bbb"));
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs/main"), "aaa\n").unwrap();
        let hub_str = hub.to_str().unwrap().to_string();
        let env = move |k: &str| (k == "HF_HUB_CACHE").then(|| hub_str.clone());
        assert_eq!(
            find_local(&lookup("Qwen/Qwen3-4B", "", tmp.path(), &env)).unwrap(),
            Some(repo.join("snapshots/aaa"))
        );
        // Nowhere, and no download allowed: the error says what to set.
        assert_eq!(
            find_local(&lookup("Org/Other", "", tmp.path(), &env)).unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn without_files_or_leave_to_download_the_error_says_what_to_set() {
        let tmp = tempfile::tempdir().unwrap();
        let no_env = |_: &str| None;
        let e = locate(&lookup("Org/Model", "", tmp.path(), &no_env))
            .await
            .unwrap_err();
        assert!(matches!(e, FilesError::NotFound { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("rl.tokenizer_path") && e.contains("rl.download_tokenizer"),
            "{e}"
        );
    }
}
