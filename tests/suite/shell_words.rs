//! The docs' shell lines split into words, so tests run the commands
//! the README and the book show, as written.

/// A shell line's words: white space splits them, single quotes keep
/// theirs (all the docs' lines need); a `#` comment ends them.
pub fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            '#' if !quoted && !any => break,
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}
