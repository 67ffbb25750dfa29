//! The doctests of this crate are the README's and the getting-started guide's examples, and
//! they compile against this crate's dev-dependencies. So that "every example compiles"
//! means "compiles from what the guide tells a user to declare", each dev-dependency must be
//! declared in one of the guide's `toml` blocks, with no feature the guide leaves out.

use std::collections::BTreeMap;

/// Dev-dependencies that no doctest uses: the other tests' own.
const TEST_ONLY: &[&str] = &["serde_json"];

/// `name -> features` of the dependency lines (`name = { … features = [...] … }` or
/// `name.workspace = true`) in `toml`'s section `section`, or in every line when `section`
/// is `None`.
fn dependencies(toml: &str, section: Option<&str>) -> BTreeMap<String, Vec<String>> {
    let mut inside = section.is_none();
    let mut deps = BTreeMap::new();
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = section.is_none_or(|s| line == s);
            continue;
        }
        if !inside || line.starts_with('#') || !line.contains('=') {
            continue;
        }
        let name = line.split(['=', '.']).next().unwrap().trim().to_owned();
        let features = line
            .split_once("features = [")
            .map(|(_, rest)| {
                rest.split(']')
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|f| f.trim().trim_matches('"').to_owned())
                    .filter(|f| !f.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        deps.insert(name, features);
    }
    deps
}

/// The contents of the guide's ```` ```toml ```` blocks.
fn toml_blocks(markdown: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in markdown.lines() {
        match (inside, line.trim()) {
            (false, "```toml") => inside = true,
            (true, "```") => inside = false,
            (true, _) => {
                out.push_str(line);
                out.push('\n');
            }
            _ => {}
        }
    }
    out
}

#[test]
fn every_dev_dependency_of_the_doctests_is_one_the_guide_tells_users_to_declare() {
    let manifest = include_str!("../Cargo.toml");
    let guide = include_str!("../../../docs/getting-started.md");
    let declared = dependencies(&toml_blocks(guide), None);
    assert!(
        declared.contains_key("fastfallback") && declared.contains_key("tokio"),
        "the guide's blocks: {declared:?}"
    );
    let dev = dependencies(manifest, Some("[dev-dependencies]"));
    assert!(dev.contains_key("tokio"), "{dev:?}");
    for (name, features) in dev {
        if TEST_ONLY.contains(&name.as_str()) {
            continue;
        }
        let listed = declared.get(&name).unwrap_or_else(|| {
            panic!(
                "dev-dependency {name} is not in docs/getting-started.md: a doctest could use it"
            )
        });
        for f in features {
            assert!(
                listed.contains(&f),
                "dev-dependency {name} has feature {f}, which the guide does not declare"
            );
        }
    }
}

#[test]
fn the_dependency_reader_sees_names_and_features() {
    let toml = "[a]\nx = 1\n[dev-dependencies]\n# c\nfoo.workspace = true\nbar = { version = \"1\", features = [\"p\", \"q\"] }\n";
    let deps = dependencies(toml, Some("[dev-dependencies]"));
    assert_eq!(deps.len(), 2, "{deps:?}");
    assert!(deps["foo"].is_empty());
    assert_eq!(deps["bar"], ["p", "q"]);
    assert_eq!(
        toml_blocks("a\n```toml\nk = 1\n```\n```rust\nno\n```\n"),
        "k = 1\n"
    );
}
