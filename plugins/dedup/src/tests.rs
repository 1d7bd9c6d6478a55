use super::*;

/// `assert_eq!` by `Debug` text (the generated WIT types have no `PartialEq`).
macro_rules! assert_same {
    ($a:expr, $b:expr $(, $($msg:tt)+)?) => {{
        let (a, b) = (format!("{:?}", $a), format!("{:?}", $b));
        assert_eq!(a, b $(, $($msg)+)?);
    }};
}

/// The built-in skills (skills/*/SKILL.md), sorted by id.
fn builtin_skills() -> Vec<Skill> {
    metaclaw_plugin_text::skills::builtin_skills()
        .unwrap()
        .into_iter()
        .map(|s| Skill {
            id: s.id,
            name: s.name,
            description: s.description,
            category: s.category,
            tags: s.tags,
            version: s.version,
            body: s.body,
        })
        .collect()
}

/// A mechanical rewording: every fifth word dropped, common words swapped.
fn reword(text: &str) -> String {
    let swaps = [
        ("Use", "Prefer"),
        ("use", "prefer"),
        ("before", "prior to"),
        ("file", "document"),
        ("files", "documents"),
        ("check", "verify"),
        ("Check", "Verify"),
        ("run", "execute"),
        ("Run", "Execute"),
        ("first", "initially"),
        ("never", "do not ever"),
        ("Never", "Do not ever"),
        ("the", "your"),
        ("a", "one"),
        ("when", "whenever"),
        ("and", "plus"),
    ];
    text.lines()
        .map(|l| {
            let words: Vec<&str> = l.split(' ').collect();
            let mut out = vec![];
            for (k, w) in words.iter().enumerate() {
                if k % 5 == 4 {
                    continue;
                }
                let s = swaps
                    .iter()
                    .find(|(a, _)| a == w)
                    .map(|(_, b)| *b)
                    .unwrap_or(w);
                out.push(s);
            }
            out.join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `git-rebase-safely` retold in other words, as an LLM would.
const REWORDED_REBASE: &str = "# Safely rebasing a feature branch

1. Make sure the working tree is clean with `git status`; stash or commit any pending changes.
2. Create a backup branch first: `git branch backup/my-feature`.
3. Fetch the latest base with `git fetch origin`.
4. Run `git rebase origin/main`, or `git rebase --onto origin/main <old-base> my-feature` to move just your commits.
5. When conflicts appear, resolve them, `git add` the files and `git rebase --continue`; `git rebase --abort` goes back.
6. Build and run the tests after rebasing: a rebase without conflicts can still break the code.
7. Check the result against the backup with `git range-diff`.
8. Push with `git push --force-with-lease` rather than `--force`.
9. Remove the backup branch after the push succeeds.

## Avoid
- Rebasing main or release branches that other people build on.
- Plain `git push --force`, which may overwrite a teammate's commits without warning.
";

fn no_embed(_: &[String]) -> Result<Vec<Vec<f32>>, String> {
    Err("embed is not granted".into())
}

fn draft(name: &str, description: &str, tags: &[&str], body: &str) -> SkillDraft {
    SkillDraft {
        name: name.into(),
        description: description.into(),
        category: "general".into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        body: body.into(),
        updates: None,
    }
}

fn as_draft(s: &Skill) -> SkillDraft {
    SkillDraft {
        name: s.name.clone(),
        description: s.description.clone(),
        category: s.category.clone(),
        tags: s.tags.clone(),
        body: s.body.clone(),
        updates: None,
    }
}

fn one(d: SkillDraft, library: &[Skill]) -> DraftOutcome {
    let mut out = process(vec![d], library, &no_embed);
    assert_same!(out.len(), 1);
    out.remove(0)
}

/// The library skill a draft was found to duplicate, if any.
fn duplicate_of(outcome: &DraftOutcome) -> Option<String> {
    match outcome {
        DraftOutcome::Keep(d) => d.updates.clone(),
        DraftOutcome::Reject(reason) => reason
            .strip_prefix("near-duplicate of ")
            .and_then(|r| r.split(' ').next())
            .map(str::to_string),
    }
}

const MOON: (&str, &str, &str) = (
    "lesson-distance-earth-moon",
    "When asked: what is the distance from the earth to the moon",
    "1. Check astronomical figures against a reliable source such as NASA.\n2. The average distance is about 384,400 km; say whether you mean perigee or apogee.\n3. Give units and round sensibly.",
);
const INGRESS: (&str, &str, &str) = (
    "configure-kubernetes-ingress",
    "Configure a Kubernetes ingress to route HTTP traffic to services with TLS.",
    "1. Install an ingress controller such as ingress-nginx.\n2. Write an Ingress resource with host rules and paths pointing at Services.\n3. Add a TLS secret and reference it under spec.tls.\n4. Check with `kubectl describe ingress` and curl the host.",
);
const BREAD: (&str, &str, &str) = (
    "bake-sourdough-bread",
    "Bake a loaf of sourdough bread at home with a starter.",
    "1. Feed the starter the night before.\n2. Mix flour, water and salt; fold every 30 minutes.\n3. Proof overnight in the fridge.\n4. Bake at 250 C in a Dutch oven, lid on for 20 minutes, then off.",
);
/// Near the library's topics, but skills of their own.
const RELATED: &[(&str, &str, &str)] = &[
    (
        "git-cherry-pick-commits",
        "Copy specific commits from one branch to another with git cherry-pick.",
        "1. Find the commits with `git log --oneline other-branch`.\n2. Run `git cherry-pick <sha>`; use `-x` to record where it came from.\n3. On conflicts, fix them and `git cherry-pick --continue`.",
    ),
    (
        "write-meeting-notes",
        "Write concise meeting notes with decisions, owners and deadlines.",
        "1. Lead with the decisions made.\n2. List action items with one owner and a due date each.\n3. Keep discussion summaries to one line per topic.",
    ),
    (
        "docker-image-size",
        "Make Docker images smaller with multi-stage builds and slim base images.",
        "1. Build in one stage and copy only the artifacts into a slim or distroless stage.\n2. Order layers so dependencies cache before source changes.\n3. Add a .dockerignore.",
    ),
];

#[test]
fn the_builtin_skills_are_not_duplicates_of_each_other() {
    let lib = builtin_skills();
    assert_same!(lib.len(), 44);
    for (i, skill) in lib.iter().enumerate() {
        let mut others = lib.clone();
        others.remove(i);
        let outcome = one(as_draft(skill), &others);
        assert_same!(outcome, DraftOutcome::Keep(as_draft(skill)), "{}", skill.id);
    }
    // The closest pairs stay clear of every threshold.
    let vocabularies = Vocabularies::new(lib.iter().map(skill_texts));
    let entries: Vec<Entry> = lib
        .iter()
        .map(|s| vocabularies.entry(None, skill_texts(s), None))
        .collect();
    let mut strongest = 0f32;
    for a in 0..entries.len() {
        for b in a + 1..entries.len() {
            let s = similarity(&entries[a], &entries[b], &Embeddings(None));
            strongest = strongest.max(s.strength());
        }
    }
    assert!(strongest < 0.75, "{strongest}");
}

#[test]
fn a_renamed_copy_with_the_same_description_is_found() {
    let lib = builtin_skills();
    for skill in &lib {
        let d = draft(
            &format!("{}-again", skill.name),
            &skill.description,
            &[],
            "Do this carefully and check the result.",
        );
        let outcome = one(d, &lib);
        assert_same!(
            duplicate_of(&outcome),
            Some(skill.id.clone()),
            "{outcome:?}"
        );
    }
}

#[test]
fn a_copy_in_other_words_is_found() {
    let lib = builtin_skills();
    let d = draft(
        "safe-git-rebase-workflow",
        "How to rebase your feature branch on top of main safely, without losing commits or breaking shared history.",
        &["git", "rebase"],
        REWORDED_REBASE,
    );
    let outcome = one(d, &lib);
    assert_same!(
        duplicate_of(&outcome).as_deref(),
        Some("git-rebase-safely"),
        "{outcome:?}"
    );
    // Most reworded lines are recognised: at most a few are carried over.
    if let DraftOutcome::Keep(merged) = &outcome {
        let existing = lib.iter().find(|s| s.id == "git-rebase-safely").unwrap();
        let added = merged.body.len() - existing.body.trim_end().len();
        assert!(added < 200, "{}", merged.body);
    }
    // Mechanically reworded copies of every skill, under a new name.
    for skill in &lib {
        let d = draft(
            &skill.name.split('-').rev().collect::<Vec<_>>().join("-"),
            &reword(&skill.description),
            &[],
            &reword(&skill.body),
        );
        let outcome = one(d, &lib);
        assert_same!(
            duplicate_of(&outcome),
            Some(skill.id.clone()),
            "{outcome:?}"
        );
    }
}

#[test]
fn new_topics_match_nothing() {
    let lib = builtin_skills();
    for (name, description, body) in [MOON, INGRESS, BREAD].iter().chain(RELATED) {
        let d = draft(name, description, &[], body);
        assert_same!(one(d.clone(), &lib), DraftOutcome::Keep(d), "{name}");
    }
}

#[test]
fn a_copy_that_adds_nothing_is_dropped() {
    let lib = builtin_skills();
    let skill = lib.iter().find(|s| s.id == "git-rebase-safely").unwrap();
    // Its own lines, in another order, under a new name.
    let mut lines: Vec<&str> = skill.body.lines().collect();
    lines.reverse();
    let d = draft(
        "rebase-without-tears",
        &skill.description,
        &["git"],
        &lines.join("\n"),
    );
    assert_same!(
        one(d, &lib),
        DraftOutcome::Reject(
            "near-duplicate of git-rebase-safely (similarity 1.00): adds nothing new".into()
        )
    );
}

#[test]
fn a_copy_with_something_new_is_merged() {
    let lib = builtin_skills();
    let skill = lib.iter().find(|s| s.id == "git-rebase-safely").unwrap();
    let body = format!(
        "{}\n## Also\n- With Git 2.30 or later, add `--force-if-includes` to the lease.\n",
        skill.body
    );
    let d = SkillDraft {
        category: "general".into(),
        ..draft(
            "Git-Rebase-Safely",
            "Rebase without fear",
            &["git", "force-push", "Rebase"],
            &body,
        )
    };
    let DraftOutcome::Keep(merged) = one(d, &lib) else {
        panic!("dropped");
    };
    assert_same!(merged.updates.as_deref(), Some("git-rebase-safely"));
    assert_same!(merged.name, skill.name);
    assert_same!(merged.description, skill.description);
    assert_same!(merged.category, skill.category);
    let mut tags = skill.tags.clone();
    tags.push("force-push".into());
    assert_same!(merged.tags, tags);
    assert_same!(
        merged.body,
        format!(
            "{}\n\n## Also\n- With Git 2.30 or later, add `--force-if-includes` to the lease.\n",
            skill.body.trim_end()
        )
    );
}

#[test]
fn the_same_name_is_a_duplicate_whatever_it_says() {
    let lib = builtin_skills();
    let d = draft(
        "process-csv-robustly",
        "Something else",
        &[],
        "1. A new point entirely about tabs.",
    );
    let outcome = one(d, &lib);
    assert_same!(
        duplicate_of(&outcome).as_deref(),
        Some("process-csv-robustly")
    );
}

#[test]
fn a_revision_is_kept_as_it_is() {
    let lib = builtin_skills();
    let skill = lib.iter().find(|s| s.id == "write-clear-emails").unwrap();
    let mut d = as_draft(skill);
    d.updates = Some(skill.id.clone());
    assert_same!(one(d.clone(), &lib), DraftOutcome::Keep(d.clone()));
    // A second revision of the same skill in one call is one too many.
    let out = process(vec![d.clone(), d.clone()], &lib, &no_embed);
    assert_same!(out[0], DraftOutcome::Keep(d));
    assert!(
        matches!(&out[1], DraftOutcome::Reject(r) if r.contains("already updates")),
        "{out:?}"
    );
}

#[test]
fn a_duplicate_of_an_earlier_draft_is_dropped() {
    let lib = builtin_skills();
    let (name, description, body) = INGRESS;
    let first = draft(name, description, &["kubernetes"], body);
    let second = draft(
        "kubernetes-ingress-setup",
        description,
        &[],
        "1. Install ingress-nginx first.",
    );
    let other = draft(BREAD.0, BREAD.1, &[], BREAD.2);
    let out = process(vec![first.clone(), second, other.clone()], &lib, &no_embed);
    assert_same!(out[0], DraftOutcome::Keep(first));
    assert_same!(
        out[1],
        DraftOutcome::Reject(
            "near-duplicate of the draft \"configure-kubernetes-ingress\" earlier in this batch (similarity 1.00)".into()
        )
    );
    assert_same!(out[2], DraftOutcome::Keep(other));
    // A second copy of a library skill that an earlier draft was merged into.
    let skill = lib.iter().find(|s| s.id == "git-rebase-safely").unwrap();
    let merged = draft(
        "rebase-again",
        &skill.description,
        &[],
        "1. Rebase in small steps.",
    );
    let copy = draft("rebase-copy", &skill.description, &[], &skill.body);
    let out = process(vec![merged, copy], &lib, &no_embed);
    assert_same!(duplicate_of(&out[0]), Some("git-rebase-safely"));
    assert!(
        matches!(&out[1], DraftOutcome::Reject(r) if r.starts_with("near-duplicate of git-rebase-safely (similarity") && r.ends_with("which an earlier draft in this batch already updates")),
        "{out:?}"
    );
}

/// A stand-in for the host's model: texts about the moon embed alike.
fn moon_embed(texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
    Ok(texts
        .iter()
        .map(|t| {
            let t = t.to_lowercase();
            if t.contains("moon") || t.contains("lunar") || t.contains("satellite") {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        })
        .collect())
}

#[test]
fn embeddings_find_paraphrases_and_their_absence_is_no_error() {
    let mut lib = builtin_skills();
    lib.push(Skill {
        id: "lunar-distance".into(),
        name: "lunar-distance".into(),
        description: "How far away the Moon is".into(),
        category: "general".into(),
        tags: vec!["astronomy".into()],
        version: "1.0.0".into(),
        body: "1. Say 384,400 km on average.".into(),
    });
    let (name, description, body) = MOON;
    let d = draft(name, description, &[], body);
    // Lexically they share little.
    assert_same!(one(d.clone(), &lib), DraftOutcome::Keep(d.clone()));
    // The embeddings say they are the same.
    let out = process(vec![d.clone()], &lib, &moon_embed);
    assert_same!(
        duplicate_of(&out[0]).as_deref(),
        Some("lunar-distance"),
        "{out:?}"
    );
    // Embeddings of the wrong count are ignored, like a refusal.
    let short = |_: &[String]| Ok(vec![vec![1.0]]);
    assert_same!(
        process(vec![d.clone()], &lib, &short),
        vec![DraftOutcome::Keep(d)]
    );
}

#[test]
fn novel_lines_skip_copies_and_rewordings() {
    let vocabulary = Vocabulary::new();
    let existing = "# Title\n\n1. Run the tests before pushing.\n2. Keep commits small.\n\n## Avoid\n- Force-pushing shared branches.";
    assert!(
        novel_lines(
            "- run the TESTS before pushing!\n## Avoid\n3. keep commits small",
            existing,
            &vocabulary
        )
        .is_empty()
    );
    assert!(novel_lines("1. Before pushing, run the tests.", existing, &vocabulary).is_empty());
    assert_same!(
        novel_lines(
            "# Other title\n## Avoid\n- Committing generated files.\n## Notes\n",
            existing,
            &vocabulary
        ),
        ["- Committing generated files."]
    );
    assert_same!(
        novel_lines("## Tips\n- Sign your commits.", existing, &vocabulary),
        ["## Tips", "- Sign your commits."]
    );
    assert_same!(
        normalize_line("  12. **Use** `git status`, then push!"),
        "use git status then push"
    );
}

#[test]
fn nothing_in_nothing_out() {
    assert!(process(Vec::new(), &builtin_skills(), &no_embed).is_empty());
    let d = draft(BREAD.0, BREAD.1, &[], BREAD.2);
    assert_same!(
        process(vec![d.clone()], &[], &no_embed),
        vec![DraftOutcome::Keep(d)]
    );
}

#[test]
fn metadata_asks_for_embed() {
    let m = Dedup::metadata();
    assert_same!(m.name, "dedup");
    assert_same!(m.version, env!("CARGO_PKG_VERSION"));
    assert_same!(m.capabilities, ["embed"]);
}
