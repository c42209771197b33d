//! Which values are secrets, for every output mcsup writes for people (the plan, its JSON,
//! warnings, logs): one rule, used everywhere.
//!
//! A variable or flag is secret when the LAST word of its name (split on `_` and `-`) is a
//! secret word — `HF_TOKEN`, `--api-key`, `AWS_SECRET_ACCESS_KEY`, `DB_PASSWORD` — so names that
//! merely contain one stay visible: `--max-prefill-tokens`, `SGLANG_PER_TOKEN_GROUP_QUANT_8BIT_V2`,
//! `--dbo-decode-token-threshold`, `--ssl-keyfile`. A value shaped like a known credential
//! (`hf_…`, `sk-…`, `ghp_…`, `AKIA…`, `nvapi-…`, `xox?-…`) is secret whatever its name. Pure.

/// The placeholder shown instead of a secret.
pub const REDACTED: &str = "<redacted>";

/// Last words that make a name secret.
const SECRET_WORDS: [&str; 10] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "KEY",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
];

/// Is a variable or flag with this name a secret? (`--api-key`, `HF_TOKEN`, `api_key`)
pub fn secret_name(name: &str) -> bool {
    let trimmed = name.trim_start_matches('-');
    let last = trimmed
        .rsplit(['_', '-', '.'])
        .find(|w| !w.is_empty())
        .unwrap_or("");
    let upper = last.to_ascii_uppercase();
    SECRET_WORDS.contains(&upper.as_str())
}

/// Does this value look like a credential of a known provider?
pub fn secret_value(value: &str) -> bool {
    let v = value.trim();
    let tail_ok = |rest: &str, min: usize| {
        rest.len() >= min
            && rest
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
    };
    const PREFIXES: [(&str, usize); 9] = [
        ("hf_", 20),
        ("sk-", 20),
        ("ghp_", 20),
        ("gho_", 20),
        ("ghs_", 20),
        ("github_pat_", 20),
        ("nvapi-", 20),
        ("xoxb-", 10),
        ("xoxp-", 10),
    ];
    if PREFIXES
        .iter()
        .any(|(p, min)| v.strip_prefix(p).is_some_and(|rest| tail_ok(rest, *min)))
    {
        return true;
    }
    // AWS access key ids.
    v.len() == 20
        && (v.starts_with("AKIA") || v.starts_with("ASIA"))
        && v.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// An environment variable's value as it may be shown.
pub fn shown<'a>(name: &str, value: &'a str) -> &'a str {
    if secret_name(name) || secret_value(value) {
        REDACTED
    } else {
        value
    }
}

/// An argv with secret values replaced: `--api-key X`, `--api-key=X` and credential-shaped
/// words. A secret flag followed by another flag is a boolean and swallows nothing.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for a in argv {
        if hide_next && !a.starts_with('-') {
            out.push(REDACTED.to_string());
            hide_next = false;
            continue;
        }
        hide_next = false;
        if let Some(flag) = a.strip_prefix('-') {
            let flag = flag.trim_start_matches('-');
            match flag.split_once('=') {
                Some((name, value)) if secret_name(name) || secret_value(value) => {
                    out.push(format!(
                        "{}={REDACTED}",
                        &a[..a.len() - flag.len() + name.len()]
                    ));
                    continue;
                }
                None if secret_name(flag) => hide_next = true,
                _ => {}
            }
        }
        out.push(if secret_value(a) {
            REDACTED.to_string()
        } else {
            a.clone()
        });
    }
    out
}

/// A shell text (a process's `preamble`) with its secrets replaced, and the values replaced:
/// assignments to a secret name (`export HF_TOKEN=...`, `DB_PASSWORD="two words"`), secret flags
/// (`--api-key X`, `--api-key=X`) and credential-shaped words, also inside a quoted string
/// (`"Authorization: Bearer sk-..."`). Words are split on blanks and `;&|()` outside quotes; the
/// quotes are kept, the secret inside them replaced.
pub fn redact_shell(text: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut hidden = Vec::new();
    let mut hide_next = false;
    // The command the current word belongs to (its program's base name), for the short options
    // whose value is a password only there (the adversarial re-run's NEW-C).
    let mut command = String::new();
    let mut at_command = true;
    let mut user_next = false;
    let mut rest = text;
    while !rest.is_empty() {
        let sep_len = rest
            .find(|c: char| !(c.is_whitespace() || ";&|()".contains(c)))
            .unwrap_or(rest.len());
        if rest[..sep_len].contains(|c: char| ";&|()\n".contains(c)) {
            at_command = true;
        }
        out.push_str(&rest[..sep_len]);
        rest = &rest[sep_len..];
        let word_len = shell_word_len(rest);
        if word_len == 0 {
            continue;
        }
        let word = &rest[..word_len];
        rest = &rest[word_len..];
        if at_command && !word.contains('=') {
            command = word.rsplit('/').next().unwrap_or(word).to_string();
            at_command = false;
        }
        let (shown, values) = if user_next {
            // `curl -u user:password`: the part after the first colon.
            match word.split_once(':') {
                Some((user, pass)) if !pass.trim_matches(['"', '\'']).is_empty() => {
                    let bare = pass.trim_matches(['"', '\'']);
                    (
                        format!("{user}:{}", pass.replacen(bare, REDACTED, 1)),
                        vec![bare.to_string()],
                    )
                }
                _ => (word.to_string(), Vec::new()),
            }
        } else if let Some(pass) = word
            .strip_prefix("-p")
            .filter(|p| !p.is_empty() && MYSQL_FAMILY.contains(&command.as_str()))
        {
            // `mysql -pPASSWORD`: the value is attached to `-p`.
            (format!("-p{REDACTED}"), vec![pass.to_string()])
        } else {
            redact_shell_word(word, hide_next)
        };
        user_next = matches!(word, "-u" | "--user") && matches!(command.as_str(), "curl" | "wget");
        hide_next = (!word.contains('=')
            && word.starts_with('-')
            && secret_name(word.trim_start_matches('-')))
            || (word == "-p" && command == "sshpass")
            || word
                .strip_suffix(':')
                .is_some_and(|w| !w.starts_with('-') && secret_name(w));
        hidden.extend(values);
        out.push_str(&shown);
    }
    (out, hidden)
}

/// Programs whose `-pVALUE` is a password (MySQL's clients).
const MYSQL_FAMILY: &[&str] = &["mysql", "mariadb", "mysqldump", "mysqladmin"];

/// The length of the shell word at the start of `text`: up to a blank or `;&|()` outside
/// quotes (a backslash escapes the next character outside single quotes).
fn shell_word_len(text: &str) -> usize {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match quote {
            Some(q) if c == q => quote = None,
            Some('\'') => {}
            Some(_) if c == '\\' => escaped = true,
            Some(_) => {}
            None if c == '\\' => escaped = true,
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c.is_whitespace() || ";&|()".contains(c) => return i,
            None => {}
        }
    }
    text.len()
}

/// One word of [`redact_shell`]: as shown, and the secrets it hid.
fn redact_shell_word(word: &str, after_secret_flag: bool) -> (String, Vec<String>) {
    let is_quote = |c: char| c == '"' || c == '\'';
    // `NAME=VALUE` (a shell assignment) or `--flag=VALUE`: the whole value.
    if let Some((name, value)) = word.split_once('=') {
        let bare = value.trim_matches(is_quote);
        // `NAME+=VALUE` appends (round 4's N12): the same secret.
        let bare_name = name.strip_suffix('+').unwrap_or(name);
        let name_ok = !bare_name.is_empty()
            && bare_name
                .trim_start_matches('-')
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if name_ok && !bare.is_empty() && (secret_name(bare_name) || secret_value(bare)) {
            return (
                format!("{name}={}", value.replacen(bare, REDACTED, 1)),
                vec![bare.to_string()],
            );
        }
    }
    let bare = word.trim_matches(is_quote);
    if after_secret_flag && !word.starts_with('-') && !bare.is_empty() {
        return (word.replacen(bare, REDACTED, 1), vec![bare.to_string()]);
    }
    // Credential-shaped parts, in the word or in the quoted string it is.
    let mut shown = word.to_string();
    let mut hidden = Vec::new();
    let mut after_label = false;
    for part in bare
        .split(|c: char| c.is_whitespace() || is_quote(c) || c == '=')
        .filter(|p| !p.is_empty())
    {
        // Free text `password: VALUE` inside a quoted string (the re-run's NEW-C).
        let label = part.strip_suffix(':').is_some_and(secret_name);
        if std::mem::replace(&mut after_label, label) || secret_value(part) {
            shown = shown.replacen(part, REDACTED, 1);
            hidden.push(part.to_string());
        } else if let Some(password) = url_password(part) {
            shown = shown.replacen(&format!(":{password}@"), &format!(":{REDACTED}@"), 1);
            hidden.push(password.to_string());
        }
    }
    (shown, hidden)
}

/// The password of a URL's `user:password@` part (round 4's N12: `curl
/// https://user:passw0rd@host` was shown as written).
fn url_password(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

/// Replace every known secret value that occurs in a free text (a warning built from values).
pub fn redact_text(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_string();
    for s in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(s, REDACTED);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preambles_secrets_are_replaced_and_its_shape_kept() {
        let token = "sk-abcdefghijklmnopqrstuvwx";
        let gh = "ghp_ABCDEFGHIJKLMNOPQRSTUVWX";
        let text = format!(
            "export MY_PASSWORD=hunter2; export HF_HOME=/models\ncurl -H \"Authorization: Bearer {token}\" --api-key 'k3y' --token={gh} x\nTOKEN_FILE=/a DB_PASS=\"two words\" && echo {gh}"
        );
        let (shown, hidden) = redact_shell(&text);
        assert_eq!(
            shown,
            "export MY_PASSWORD=<redacted>; export HF_HOME=/models\ncurl -H \"Authorization: Bearer <redacted>\" --api-key '<redacted>' --token=<redacted> x\nTOKEN_FILE=/a DB_PASS=\"<redacted>\" && echo <redacted>"
        );
        for v in ["hunter2", token, "k3y", gh, "two words"] {
            assert!(hidden.iter().any(|h| h == v), "{v} in {hidden:?}");
            assert!(!shown.contains(v));
        }
        // Round 4's N12: an appended secret and a URL's password.
        let (shown, hidden) = redact_shell(
            "export HF_TOKEN+=appendval; curl https://user:passw0rd@host/x http://h:80/",
        );
        assert_eq!(
            shown,
            "export HF_TOKEN+=<redacted>; curl https://user:<redacted>@host/x http://h:80/"
        );
        assert_eq!(hidden, ["appendval", "passw0rd"]);
        // Nothing secret: unchanged.
        let plain = "source /opt/env.sh; export NCCL_DEBUG=INFO\nulimit -n 65536";
        assert_eq!(redact_shell(plain), (plain.to_string(), vec![]));
    }

    /// The adversarial re-run's NEW-C: short options whose value is a password for their
    /// program, and free-text `password: VALUE`; the same options elsewhere are left alone.
    #[test]
    fn short_option_and_free_text_passwords_are_replaced() {
        let text = "curl -u admin:hunter2secret https://host/y\nmysql -pMyS3cretPw db\nsshpass -p sshpassword77 ssh host\necho \"password: p4ssw0rdinline\"";
        let (shown, hidden) = redact_shell(text);
        assert_eq!(
            shown,
            "curl -u admin:<redacted> https://host/y\nmysql -p<redacted> db\nsshpass -p <redacted> ssh host\necho \"password: <redacted>\""
        );
        assert_eq!(
            hidden,
            [
                "hunter2secret",
                "MyS3cretPw",
                "sshpassword77",
                "p4ssw0rdinline"
            ]
        );
        // `-p` and `-u` of other programs are not passwords.
        let plain = "python3 -m http.server -p8000; ssh -p 2222 host; tar -u x:y; ps -u root:x";
        assert_eq!(redact_shell(plain), (plain.to_string(), vec![]));
    }

    /// Real names from srt-slurm recipes and the tools around them, both ways.
    #[test]
    fn names_that_are_and_are_not_secrets() {
        let secret = [
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            "HUGGINGFACE_TOKEN",
            "GITHUB_TOKEN",
            "AWS_SESSION_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "WANDB_API_KEY",
            "OPENAI_API_KEY",
            "NGC_API_KEY",
            "NVIDIA_API_KEY",
            "ANTHROPIC_API_KEY",
            "DB_PASSWORD",
            "REDIS_PASSWORD",
            "MINIO_SECRET",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "--api-key",
            "--hf-token",
            "--admin-api-key",
            "api_key",
            "--password",
            "SLACK_BOT_TOKEN",
        ];
        let visible = [
            "SGLANG_PER_TOKEN_GROUP_QUANT_8BIT_V2",
            "SGLANG_OPT_DEEPGEMM_MEGA_MOE_NUM_MAX_TOKENS_PER_RANK",
            "--max-prefill-tokens",
            "--speculative-num-draft-tokens",
            "--num-draft-tokens",
            "--swa-full-tokens-ratio",
            "--dbo-decode-token-threshold",
            "--skip-tokenizer-init",
            "--max-total-tokens",
            "--chunked-prefill-size",
            "--tokenizer-path",
            "--ssl-keyfile",
            "--key-prefix",
            "MOONCAKE_GLOBAL_SEGMENT_SIZE",
            "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT",
            "TORCH_DISTRIBUTED_DEFAULT_TIMEOUT",
            "DYN_SYSTEM_PORT",
            "NCCL_IB_GID_INDEX",
            "MC_GID_INDEX",
            "VLLM_NIXL_SIDE_CHANNEL_HOST",
            "--kv-cache-dtype",
            "--max-running-requests",
            "SGLANG_ENABLE_JIT_DEEPGEMM",
            "TOKENIZERS_PARALLELISM",
            "--enable-tokenizer-batch-encode",
        ];
        for n in secret {
            assert!(secret_name(n), "{n} should be secret");
        }
        for n in visible {
            assert!(!secret_name(n), "{n} should be visible");
        }
        assert!(secret.len() + visible.len() >= 40);
    }

    #[test]
    fn credential_shaped_values() {
        assert!(secret_value("hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"));
        assert!(secret_value("sk-proj-abcdefghijklmnopqrstuvwxyz"));
        assert!(secret_value("ghp_0123456789abcdefghijABCDEFGHIJ"));
        assert!(secret_value("AKIAIOSFODNN7EXAMPLE"));
        assert!(!secret_value("hf_transfer"));
        assert!(!secret_value("sk-1"));
        assert!(!secret_value("400gb"));
        assert!(!secret_value("/models/DeepSeek-R1"));
        assert_eq!(
            shown("MY_VAR", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"),
            REDACTED
        );
        assert_eq!(shown("MC_GID_INDEX", "3"), "3");
    }

    #[test]
    fn a_boolean_flag_never_swallows_the_next_word() {
        let argv: Vec<String> = [
            "sglang",
            "--skip-tokenizer-init",
            "--trust-remote-code",
            "--api-key",
            "s3cret",
            "--hf-token=abc",
            "--max-prefill-tokens",
            "16384",
            "--auth",
            "--port",
            "30000",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            redact_argv(&argv),
            [
                "sglang",
                "--skip-tokenizer-init",
                "--trust-remote-code",
                "--api-key",
                REDACTED,
                "--hf-token=<redacted>",
                "--max-prefill-tokens",
                "16384",
                "--auth",
                "--port",
                "30000"
            ]
        );
    }
}
