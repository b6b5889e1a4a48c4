//! A scan of one Rust file for its functions and its test-only lines: not a parser, a
//! brace matcher over the file's tokens that is right for the code of this workspace.
//!
//! The rule, as the tidy test documents it:
//! - Comments, string literals (plain, byte, C and raw, `r#"..."#`) and char literals are blanked
//!   first, so a brace or a `fn` inside them does not count (`'{'` is a char, `'a` a lifetime).
//! - A function is the keyword `fn` followed by a name, up to the first `{` or `;` outside
//!   parentheses and brackets; with `;` it has no body (a trait method, a foreign function) and
//!   is not measured, with `{` its body runs to the matching `}`. Its length is the lines from
//!   the `fn` line through the line of that `}`, both counted: attributes and doc comments above
//!   it are not, blank and comment lines inside it are. A nested function counts for itself and
//!   inside its outer function.
//! - A function is named by the items around it: `mod m { impl<T> Tr for Ty<T> { fn f() } }` is
//!   `m::Ty::f` (the type of an impl, the name of a trait, a module or an outer function).
//! - An item under `#[cfg(test)]` (an inline test module, a test-only function or impl, and
//!   `#[cfg(test)] mod name;`, whose file the caller then leaves out) is test code: its lines,
//!   from the attribute to its end, are not product lines, and its functions are not measured.
//!   `#[cfg(any(test, ...))]` is product code: other builds compile it too.

/// What a scan found in one file.
#[derive(Debug, Default)]
pub struct Scan {
    pub functions: Vec<Function>,
    /// Lines of the file outside `#[cfg(test)]` items.
    pub product_lines: usize,
    /// Modules declared `#[cfg(test)] mod name;`: their files are test code.
    pub test_modules: Vec<String>,
    /// Every brace and parenthesis closed: false means the scan misread the file.
    pub balanced: bool,
}

#[derive(Debug, Clone)]
pub struct Function {
    /// `Type::name`, `module::name` or `name`.
    pub name: String,
    /// The line of its `fn` (1-based).
    pub line: usize,
    pub lines: usize,
}

#[derive(Debug)]
struct Token {
    text: String,
    line: usize,
}

/// The item whose `{` comes next: a function (name, line) or an item that names what is inside
/// it (a module, trait or impl), seen at a parenthesis depth.
struct Pending {
    function: Option<(String, usize)>,
    label: String,
    parens: i32,
}

/// Where the scan is: the open braces, each with the name it gives the functions inside it
/// (an impl's type, a module...); the open function bodies (brace depth, name, first line).
#[derive(Default)]
struct State {
    braces: Vec<Option<String>>,
    bodies: Vec<(usize, String, usize)>,
    pending: Option<Pending>,
    parens: i32,
}

pub fn scan(source: &str) -> Scan {
    let tokens = tokens(&blank(source));
    let total_lines = source.lines().count();
    let mut scan = Scan::default();
    let mut state = State::default();
    let mut test_lines = 0;
    let mut i = 0;
    while i < tokens.len() {
        if is_cfg_test(&tokens, i) {
            let (end, module) = item_end(&tokens, i + 7);
            test_lines += tokens[end].line - tokens[i].line + 1;
            scan.test_modules.extend(module);
            i = end + 1;
            continue;
        }
        if is_inner_cfg_test(&tokens, i) {
            (test_lines, state) = (total_lines, State::default());
            break;
        }
        state.step(&tokens, i, &mut scan.functions);
        i += 1;
    }
    scan.product_lines = total_lines - test_lines.min(total_lines);
    scan.balanced = state.braces.is_empty() && state.parens == 0 && state.bodies.is_empty();
    scan
}

impl State {
    fn step(&mut self, tokens: &[Token], i: usize, functions: &mut Vec<Function>) {
        let text = tokens[i].text.as_str();
        let parens = self.parens;
        match text {
            "(" | "[" => self.parens += 1,
            ")" | "]" => self.parens -= 1,
            "fn" | "mod" | "trait" => {
                if let Some(name) = tokens.get(i + 1).filter(|t| is_ident(&t.text)) {
                    let function = (text == "fn").then(|| (name.text.clone(), tokens[i].line));
                    let label = name.text.clone();
                    self.pending = Some(Pending {
                        function,
                        label,
                        parens,
                    });
                }
            }
            "impl" if starts_item(tokens, i) => {
                let label = impl_type(tokens, i + 1);
                self.pending = Some(Pending {
                    function: None,
                    label,
                    parens,
                });
            }
            ";" if self.pending.as_ref().is_some_and(|p| p.parens == parens) => {
                self.pending = None;
            }
            "{" => match self.pending.take() {
                Some(item) if item.parens == parens => {
                    if let Some((name, line)) = item.function {
                        let name = qualified(&self.braces, &name);
                        self.bodies.push((self.braces.len() + 1, name, line));
                    }
                    self.braces.push(Some(item.label));
                }
                _ => self.braces.push(None),
            },
            "}" => {
                if self.bodies.last().is_some_and(|b| b.0 == self.braces.len()) {
                    let (_, name, line) = self.bodies.pop().expect("checked");
                    let lines = tokens[i].line - line + 1;
                    functions.push(Function { name, line, lines });
                }
                self.braces.pop();
            }
            _ => {}
        }
    }
}

fn qualified(braces: &[Option<String>], name: &str) -> String {
    let mut parts: Vec<&str> = braces.iter().flatten().map(String::as_str).collect();
    parts.push(name);
    parts.join("::")
}

/// `#[cfg(test)]` at token `i`.
fn is_cfg_test(tokens: &[Token], i: usize) -> bool {
    let want = ["#", "[", "cfg", "(", "test", ")", "]"];
    tokens.len() >= i + want.len() && want.iter().zip(&tokens[i..]).all(|(w, t)| t.text == *w)
}

/// `#![cfg(test)]` at token `i`: the whole file is test code.
fn is_inner_cfg_test(tokens: &[Token], i: usize) -> bool {
    let want = ["#", "!", "[", "cfg", "(", "test", ")", "]"];
    tokens.len() >= i + want.len() && want.iter().zip(&tokens[i..]).all(|(w, t)| t.text == *w)
}

/// The last token of the item that starts at `start` (after further attributes), and the
/// name of the module if the item is `mod name;`.
fn item_end(tokens: &[Token], start: usize) -> (usize, Option<String>) {
    let mut depth = 0;
    for j in start..tokens.len() {
        match tokens[j].text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" => depth -= 1,
            "}" => {
                depth -= 1;
                if depth == 0 {
                    return (j, None);
                }
            }
            ";" if depth == 0 => {
                let module =
                    (j >= 2 && tokens[j - 2].text == "mod").then(|| tokens[j - 1].text.clone());
                return (j, module);
            }
            _ => {}
        }
    }
    (tokens.len() - 1, None)
}

/// `impl` at `i` begins an item (not `-> impl Trait` or `x: impl Trait`).
fn starts_item(tokens: &[Token], i: usize) -> bool {
    i == 0
        || matches!(
            tokens[i - 1].text.as_str(),
            "{" | "}" | ";" | "]" | "unsafe" | "default"
        )
}

/// The type an `impl` header starting at token `start` is for: `impl<T> Tr for a::Ty<T> where
/// ... {` gives `Ty`.
fn impl_type(tokens: &[Token], start: usize) -> String {
    let mut header: Vec<&str> = Vec::new();
    let mut angles = 0;
    for j in start..tokens.len() {
        let text = tokens[j].text.as_str();
        match text {
            "{" | ";" => break,
            // Generics, of the impl or of a type, are not part of the name.
            "<" => angles += 1,
            ">" if tokens[j - 1].text != "-" => angles -= 1,
            _ if angles > 0 => {}
            "where" => break,
            // What follows `for` is the type (`impl Trait for Type`).
            "for" => header.clear(),
            _ => header.push(text),
        }
    }
    header
        .into_iter()
        .rfind(|t| is_ident(t) && !matches!(*t, "mut" | "dyn" | "const"))
        .unwrap_or("impl")
        .to_string()
}

fn is_ident(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Identifiers (keywords among them) and single punctuation characters, with their lines.
fn tokens(text: &[char]) -> Vec<Token> {
    let mut tokens = Vec::new();
    let (mut line, mut i) = (1, 0);
    while i < text.len() {
        let c = text[i];
        if c == '\n' {
            line += 1;
        }
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < text.len() && (text[i].is_alphanumeric() || text[i] == '_') {
                i += 1;
            }
            let text: String = text[start..i].iter().collect();
            tokens.push(Token { text, line });
            continue;
        }
        if !c.is_whitespace() {
            tokens.push(Token {
                text: c.to_string(),
                line,
            });
        }
        i += 1;
    }
    tokens
}

/// `source` with comments and string and char literals turned into spaces, newlines kept.
fn blank(source: &str) -> Vec<char> {
    let text: Vec<char> = source.chars().collect();
    let mut out = text.clone();
    let mut i = 0;
    while i < text.len() {
        match literal_end(&text, i) {
            Some(end) => {
                for c in &mut out[i..end] {
                    if *c != '\n' {
                        *c = ' ';
                    }
                }
                i = end;
            }
            None => i += 1,
        }
    }
    out
}

/// If a comment or a literal starts at `i`, the index just past its end.
fn literal_end(text: &[char], i: usize) -> Option<usize> {
    let at = |k: usize| text.get(k).copied().unwrap_or('\0');
    let after_ident = i > 0 && (text[i - 1].is_alphanumeric() || text[i - 1] == '_');
    match at(i) {
        '/' if at(i + 1) == '/' => Some(find(text, i, '\n').unwrap_or(text.len())),
        '/' if at(i + 1) == '*' => Some(block_comment_end(text, i)),
        '"' => Some(string_end(text, i + 1)),
        '\'' if at(i + 1) == '\\' => find(text, i + 3, '\'').map(|e| e + 1),
        '\'' if at(i + 2) == '\'' => Some(i + 3),
        'b' | 'c' | 'r' if !after_ident => prefixed_literal_end(text, i),
        _ => None,
    }
}

/// `b"..."`, `c"..."`, `b'.'`, `r"..."`, `r#"..."#`, `br#"..."#` starting at `i`.
fn prefixed_literal_end(text: &[char], i: usize) -> Option<usize> {
    let at = |k: usize| text.get(k).copied().unwrap_or('\0');
    let mut k = i + 1;
    if at(i) != 'r' && at(k) == 'r' {
        k += 1;
    }
    let raw = at(i) == 'r' || at(i + 1) == 'r';
    if !raw {
        return match at(k) {
            '"' => Some(string_end(text, k + 1)),
            '\'' if at(i) == 'b' => literal_end(text, k),
            _ => None,
        };
    }
    let hashes = text[k..].iter().take_while(|&&c| c == '#').count();
    if at(k + hashes) != '"' {
        return None; // a raw identifier (`r#match`) or an ordinary one
    }
    let mut j = k + hashes + 1;
    while j < text.len() {
        if text[j] == '"'
            && text[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(text.len())
}

fn string_end(text: &[char], mut j: usize) -> usize {
    while j < text.len() {
        match text[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    text.len()
}

fn block_comment_end(text: &[char], i: usize) -> usize {
    let (mut depth, mut j) = (0, i);
    while j + 1 < text.len() {
        match (text[j], text[j + 1]) {
            ('/', '*') => (depth, j) = (depth + 1, j + 2),
            ('*', '/') => {
                (depth, j) = (depth - 1, j + 2);
                if depth == 0 {
                    return j;
                }
            }
            _ => j += 1,
        }
    }
    text.len()
}

fn find(text: &[char], from: usize, c: char) -> Option<usize> {
    text.get(from..)?
        .iter()
        .position(|&x| x == c)
        .map(|p| from + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (source, expected functions as `name:line:lines`, product lines, test modules)
    fn check(source: &str, functions: &[&str], product_lines: usize, test_modules: &[&str]) {
        let scan = scan(source);
        let found: Vec<String> = scan
            .functions
            .iter()
            .map(|f| format!("{}:{}:{}", f.name, f.line, f.lines))
            .collect();
        assert_eq!(found, functions, "functions of:\n{source}");
        assert_eq!(
            scan.product_lines, product_lines,
            "product lines of:\n{source}"
        );
        assert_eq!(
            scan.test_modules, test_modules,
            "test modules of:\n{source}"
        );
        assert!(scan.balanced, "unbalanced scan of:\n{source}");
    }

    #[test]
    fn functions_and_their_lengths() {
        check("fn a() {\n}\n", &["a:1:2"], 2, &[]);
        check("fn a() { let s = \"}\"; }\n", &["a:1:1"], 1, &[]);
        check(
            "fn a() {\n let c = '}';\n let l: &'static str = r#\"}\"#;\n}\n",
            &["a:1:4"],
            4,
            &[],
        );
        check("fn a() {\n // }\n /* } /* } */ */\n}\n", &["a:1:4"], 4, &[]);
        check("fn a(x: [u8; 4]) -> [u8; 4] {\n x\n}\n", &["a:1:3"], 3, &[]);
        check(
            "trait T {\n fn d(&self);\n fn e(&self) {\n }\n}\n",
            &["T::e:3:2"],
            5,
            &[],
        );
        check("fn a() {\n fn b() {}\n}\n", &["a::b:2:1", "a:1:3"], 3, &[]);
        check(
            "fn f(g: fn(u8) -> u8) -> impl Fn() {\n || {}\n}\n",
            &["f:1:3"],
            3,
            &[],
        );
        check(
            "let b = b'{'; fn a<'a>(x: &'a str) {}\n",
            &["a:1:1"],
            1,
            &[],
        );
    }

    #[test]
    fn names_come_from_the_items_around() {
        let source = "mod m {\n impl<T: Fn() -> u8> fmt::Display for a::Ty<T> where T: Copy {\n  fn f() {}\n }\n impl Ty {\n  fn g() -> impl Iterator<Item = u8> { todo!() }\n }\n}\n";
        check(source, &["m::Ty::f:3:1", "m::Ty::g:6:1"], 8, &[]);
    }

    #[test]
    fn test_items_are_not_product_code() {
        let source = "fn a() {}\n#[cfg(test)]\nmod tests {\n fn long() {\n }\n}\n#[cfg(test)]\n#[allow(x)]\nmod more;\n#[cfg(any(test, feature = \"x\"))]\nfn b() {}\n";
        check(source, &["a:1:1", "b:11:1"], 11 - 5 - 3, &["more"]);
        check("#![cfg(test)]\nfn a() {}\n", &[], 0, &[]);
    }
}
