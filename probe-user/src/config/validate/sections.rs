//! Where each `[[profile]]` block of a config file starts and ends, so that a file of many
//! profiles is read one profile at a time.
//!
//! The TOML parser keeps every token, every event and the whole tree of a document at once:
//! about 2.7 KB per endpoint while a file is read, which at a million endpoints is more than
//! everything the daemon keeps afterwards. A `[[profile]]` block (its header, then its
//! `[profile.*]` and `[[profile.*]]` sub-tables) is a TOML document of its own, so the blocks
//! are parsed one by one and the rest of the file (`[daemon]`, `[dns]`, `[[sink]]`, ...) on
//! its own, with the blocks blanked out so that offsets still point into the file.
//!
//! The split is found with the TOML lexer, so a header-like line inside a multi-line string,
//! array or inline table is part of the value, not a header. Anything the split cannot place with certainty (a `[profile]` table, a
//! `profile.*` header before the first `[[profile]]`, an escaped or odd key) gives `None`, and
//! the file is parsed whole, as TOML reads it.
//!
//! A block of many endpoints is cut once more: its `[[profile.endpoint]]` tables (each with
//! the `[profile.endpoint.*]` sub-tables that follow it) are parsed a run of
//! [`ENDPOINTS_PER_RUN`] at a time, apart from the block's head (its keys and other
//! sub-tables, read with the runs blanked). One profile of 65,000 endpoints otherwise held
//! its whole tree, ~110 MB, at the daemon's start. A block whose endpoint tables the cut
//! cannot place (a `[profile.endpoint]` table, an endpoint sub-table after another section)
//! is parsed whole.
use std::{borrow::Cow, ops::Range};

use toml_parser::{
    lexer::{Token, TokenKind},
    Source,
};

/// How many endpoint tables one parse of a block's endpoints holds at most: a tree of ~1.7 KB
/// per endpoint, so ~2 MB.
pub(super) const ENDPOINTS_PER_RUN: usize = 1024;

/// A file cut into its `[[profile]]` blocks and everything else.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Sections<'t> {
    /// The file with each block replaced by blanks (a newline kept at a block's end, so the
    /// next header still starts a line): the same length, so spans are the file's.
    pub others: Cow<'t, str>,
    /// The blocks, in file order.
    pub profiles: Vec<Block>,
}

/// One `[[profile]]` block: whole lines of the file.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Block {
    pub whole: Range<usize>,
    /// Runs of its endpoint tables, in order, each at most [`ENDPOINTS_PER_RUN`] of them;
    /// empty when the block is parsed whole.
    pub runs: Vec<Range<usize>>,
    /// How many endpoint tables the runs hold.
    pub endpoints: usize,
}

impl Block {
    /// The block with its runs blanked: its `[[profile]]` table without the endpoint tables,
    /// spans relative to the block's start.
    pub fn head<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let block = &text[self.whole.clone()];
        let start = self.whole.start;
        let relative: Vec<Range<usize>> = self.runs.iter().map(|r| r.start - start..r.end - start).collect();
        match relative.first() {
            None => Cow::Borrowed(block),
            // Runs that close the block leave its beginning as it is.
            Some(first) if contiguous(&relative, block.len()) => Cow::Borrowed(&block[..first.start]),
            Some(_) => Cow::Owned(blank(block, &relative)),
        }
    }
}

/// Ranges that follow one another without a gap up to `end`.
fn contiguous(ranges: &[Range<usize>], end: usize) -> bool {
    ranges.windows(2).all(|w| w[0].end == w[1].start) && ranges.last().is_some_and(|r| r.end == end)
}

/// `text` with every range (whole lines) replaced by blanks, a newline kept at a range's end
/// so that the next header still starts a line: the same length, so spans still point in.
fn blank(text: &str, ranges: &[Range<usize>]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for r in ranges {
        bytes[r.clone()].fill(b' ');
        if text[r.clone()].ends_with('\n') {
            bytes[r.end - 1] = b'\n';
        }
    }
    // Only ASCII blanks replaced whole lines of valid UTF-8.
    String::from_utf8(bytes).expect("whole lines blanked")
}

/// The cut of the block being read into endpoint runs.
#[derive(Default)]
struct Cut {
    done: Vec<Range<usize>>,
    /// The run being read: where it started and how many tables it holds.
    open: Option<(usize, usize)>,
    endpoints: usize,
    /// The last section read was an endpoint table (or one of its sub-tables).
    in_endpoint: bool,
    /// A header the cut cannot place: the block is parsed whole.
    whole: bool,
}

impl Cut {
    fn close(&mut self, at: usize) {
        if let Some((start, _)) = self.open.take() {
            self.done.push(start..at);
        }
    }

    /// A header of the open block at `line`: `key` without its leading `profile`.
    fn header(&mut self, key: &[&str], array: bool, line: usize) {
        match (key.first() == Some(&"endpoint"), key.len(), array) {
            (true, 1, true) => {
                self.endpoints += 1;
                match &mut self.open {
                    Some((_, n)) if self.in_endpoint && *n < ENDPOINTS_PER_RUN => *n += 1,
                    _ => {
                        self.close(line);
                        self.open = Some((line, 1));
                    }
                }
                self.in_endpoint = true;
            }
            (true, 1, false) => self.whole = true,
            // A sub-table of the endpoint just read stays in its run.
            (true, _, _) if self.in_endpoint => {}
            (true, _, _) => self.whole = true,
            (false, _, _) => {
                self.close(line);
                self.in_endpoint = false;
            }
        }
    }

    /// The block ends at `end`.
    fn finish(mut self, whole: Range<usize>) -> Block {
        self.close(whole.end);
        if self.whole {
            return Block {
                whole,
                runs: Vec::new(),
                endpoints: 0,
            };
        }
        Block {
            whole,
            runs: self.done,
            endpoints: self.endpoints,
        }
    }
}

/// A table header: its dotted key, and whether it is an array of tables (`[[...]]`).
#[derive(Debug, PartialEq, Eq)]
struct Header<'t> {
    key: Vec<&'t str>,
    array: bool,
}

/// The header whose tokens (whitespace left out, up to the line's end) are `tokens`; None if
/// they are not a header this split can read with certainty.
fn header<'t>(text: &'t str, tokens: &[Token]) -> Option<Header<'t>> {
    use TokenKind::{Atom, BasicString, Dot, LeftSquareBracket as Open, LiteralString, RightSquareBracket as Close};
    let kinds: Vec<TokenKind> = tokens.iter().map(Token::kind).collect();
    // `[[` and `]]` are header brackets only when the two touch.
    let touching = |a: usize| tokens[a].span().end() == tokens[a + 1].span().start();
    let n = kinds.len();
    let array =
        n >= 4 && kinds[..2] == [Open, Open] && kinds[n - 2..] == [Close, Close] && touching(0) && touching(n - 2);
    let inner = if array {
        &tokens[2..n - 2]
    } else if n >= 2 && kinds[0] == Open && kinds[n - 1] == Close {
        &tokens[1..n - 1]
    } else {
        return None;
    };
    let mut key = Vec::new();
    for (i, t) in inner.iter().enumerate() {
        let raw = &text[t.span().start()..t.span().end()];
        match (i % 2, t.kind()) {
            (0, Atom) => key.push(raw),
            // A quoted part with an escape could spell anything: leave it to the whole parse.
            (0, BasicString) if !raw.contains('\\') => key.push(raw.get(1..raw.len() - 1)?),
            (0, LiteralString) => key.push(raw.get(1..raw.len() - 1)?),
            (1, Dot) => {}
            _ => return None,
        }
    }
    (!key.is_empty() && inner.len() % 2 == 1).then_some(Header { key, array })
}

/// The file's `[[profile]]` blocks, or None to parse it whole (no such block, or a header
/// the split cannot place).
pub(super) fn split(text: &str) -> Option<Sections<'_>> {
    let mut profiles: Vec<Block> = Vec::new();
    // The block being read: where it started, and its cut so far.
    let mut open: Option<(usize, Cut)> = None;
    let mut line_start = 0;
    let mut at_line_start = true;
    // Brackets and braces open in a value (an array or inline table over several lines): a
    // line that starts with `[` in there is an element, not a header.
    let mut depth = 0usize;
    let mut lexer = Source::new(text).lex();
    while let Some(t) = lexer.next() {
        match t.kind() {
            TokenKind::Newline => {
                at_line_start = true;
                line_start = t.span().end();
                continue;
            }
            TokenKind::Whitespace if at_line_start => continue,
            TokenKind::Eof => break,
            _ => {}
        }
        let header_line = at_line_start && depth == 0 && t.kind() == TokenKind::LeftSquareBracket;
        at_line_start = false;
        if !header_line {
            match t.kind() {
                TokenKind::LeftSquareBracket | TokenKind::LeftCurlyBracket => depth += 1,
                TokenKind::RightSquareBracket | TokenKind::RightCurlyBracket => depth = depth.saturating_sub(1),
                _ => {}
            }
            continue;
        }
        // The rest of the header's line.
        let mut tokens = vec![t];
        for t in lexer.by_ref() {
            match t.kind() {
                TokenKind::Whitespace | TokenKind::Comment => {}
                TokenKind::Newline | TokenKind::Eof => {
                    at_line_start = true;
                    break;
                }
                _ => tokens.push(t),
            }
        }
        let h = header(text, &tokens)?;
        let this_line = line_start;
        // The next line starts after this header's newline (the lexer consumed it above).
        line_start = text[this_line..].find('\n').map_or(text.len(), |i| this_line + i + 1);
        match (h.key.first() == Some(&"profile"), h.key.len(), h.array) {
            (true, 1, true) => {
                if let Some((start, cut)) = open.replace((this_line, Cut::default())) {
                    profiles.push(cut.finish(start..this_line));
                }
            }
            // `[profile]` as a table, or a profile's sub-table outside any block.
            (true, 1, false) => return None,
            (true, _, _) => match &mut open {
                None => return None,
                Some((_, cut)) => cut.header(&h.key[1..], h.array, this_line),
            },
            (false, _, _) => {
                if let Some((start, cut)) = open.take() {
                    profiles.push(cut.finish(start..this_line));
                }
            }
        }
    }
    if let Some((start, cut)) = open {
        profiles.push(cut.finish(start..text.len()));
    }
    let first = profiles.first()?.whole.start;
    // Blocks that run to the end with nothing between them leave the head of the file as it
    // is; otherwise the blocks are blanked in a copy.
    let wholes: Vec<Range<usize>> = profiles.iter().map(|b| b.whole.clone()).collect();
    let others = if contiguous(&wholes, text.len()) {
        Cow::Borrowed(&text[..first])
    } else {
        Cow::Owned(blank(text, &wholes))
    };
    Some(Sections { others, profiles })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks<'t>(text: &'t str, s: &Sections<'_>) -> Vec<&'t str> {
        s.profiles.iter().map(|b| &text[b.whole.clone()]).collect()
    }

    #[test]
    fn profiles_after_the_other_sections_leave_the_head_as_it_is() {
        let text = "[daemon]\napi_listen = \"x\"\n\n[[profile]]\nname = \"a\"\n[profile.health]\nport = 1\n\
                    [[profile.endpoint]]\naddress = \"198.18.0.1\"\n[[profile]]\nname = \"b\"\n";
        let s = split(text).expect("split");
        assert_eq!(s.others, Cow::Borrowed("[daemon]\napi_listen = \"x\"\n\n"));
        assert_eq!(
            blocks(text, &s),
            [
                "[[profile]]\nname = \"a\"\n[profile.health]\nport = 1\n[[profile.endpoint]]\naddress = \"198.18.0.1\"\n",
                "[[profile]]\nname = \"b\"\n"
            ]
        );
    }

    #[test]
    fn sections_between_profiles_stay_in_place_with_the_blocks_blanked() {
        let text = "[[profile]]\nname = \"a\"\n[dns]\nzone = \"z.\"\n[[ \"profile\" ]] # b\nname = \"b\"\n[[sink]]\nkind = \"x\"\n";
        let s = split(text).expect("split");
        assert_eq!(
            blocks(text, &s),
            ["[[profile]]\nname = \"a\"\n", "[[ \"profile\" ]] # b\nname = \"b\"\n"]
        );
        assert_eq!(s.others.len(), text.len());
        let blank_a = " ".repeat("[[profile]]\nname = \"a\"".len()) + "\n";
        let blank_b = " ".repeat("[[ \"profile\" ]] # b\nname = \"b\"".len()) + "\n";
        assert_eq!(
            s.others,
            format!("{blank_a}[dns]\nzone = \"z.\"\n{blank_b}[[sink]]\nkind = \"x\"\n")
        );
        // What is left parses, and its spans are the file's.
        let doc = toml::de::DeTable::parse(&s.others).expect("the rest parses");
        let dns = doc.get_ref().get("dns").expect("dns");
        assert_eq!(dns.span().start, text.find("[dns]").unwrap());
    }

    #[test]
    fn a_header_inside_a_multi_line_string_is_text() {
        let text = "[[profile]]\nname = \"a\"\nbody = \"\"\"\n[[profile]]\n[dns]\n\"\"\"\n";
        let s = split(text).expect("split");
        assert_eq!(blocks(text, &s), [text]);
    }

    #[test]
    fn a_line_of_a_multi_line_array_is_no_header() {
        let text = "[[profile]]\nname = \"a\"\nlists = [\n[\"x\"]\n]\nmore = { a = [\n[\"y\"]\n] }\n[[profile]]\nname = \"b\"\n";
        let s = split(text).expect("split");
        let second = text.rfind("[[profile]]").unwrap();
        assert_eq!(blocks(text, &s), [&text[..second], &text[second..]]);
    }

    #[test]
    fn what_the_split_cannot_place_is_parsed_whole() {
        for text in [
            "[daemon]\nx = 1\n",
            "[profile]\nname = \"a\"\n[[profile]]\nname = \"b\"\n",
            "[profile.health]\nport = 1\n[[profile]]\nname = \"b\"\n",
            "[[\"pro\\u0066ile\"]]\nname = \"a\"\n",
            "[ [profile]]\nname = \"a\"\n",
            "[[profile]\n",
        ] {
            assert_eq!(split(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_block_at_the_end_without_a_newline() {
        let text = "[daemon]\n[[profile]]\nname = \"a\"";
        let s = split(text).expect("split");
        assert_eq!(blocks(text, &s), ["[[profile]]\nname = \"a\""]);
        assert_eq!(s.others, "[daemon]\n");
    }

    #[test]
    fn a_blocks_endpoint_tables_are_cut_into_runs_with_their_sub_tables() {
        let endpoint = |i: usize| {
            format!(
                "[[profile.endpoint]]\naddress = \"198.18.{}.{}\"\n",
                i / 250,
                i % 250 + 1
            )
        };
        let head = "[[profile]]\nname = \"a\"\n";
        let mut text = head.to_string();
        let mut starts = Vec::new();
        for i in 0..ENDPOINTS_PER_RUN + 5 {
            starts.push(text.len());
            text += &endpoint(i);
            if i == 3 {
                text += "[profile.endpoint.headers]\nHost = \"x\"\n";
            }
        }
        // A head section between endpoints ends a run; the next table starts another.
        let health_at = text.len();
        text += "[profile.health]\nprotocol = \"tcp\"\n";
        let last = text.len();
        text += &endpoint(9999);
        text += "[dns]\nzone = \"z.\"\n";
        let end = text.len() - "[dns]\nzone = \"z.\"\n".len();
        let s = split(&text).expect("split");
        let b = &s.profiles[0];
        assert_eq!(b.whole, 0..end);
        assert_eq!(
            b.runs,
            [
                starts[0]..starts[ENDPOINTS_PER_RUN],
                starts[ENDPOINTS_PER_RUN]..health_at,
                last..end
            ]
        );
        assert_eq!(b.endpoints, ENDPOINTS_PER_RUN + 6);
        // The head keeps its own lines where they were; the runs are blanks.
        let head_text = b.head(&text);
        assert_eq!(head_text.len(), end);
        assert!(head_text.starts_with(head));
        assert_eq!(&head_text[health_at..last], &text[health_at..last]);
        assert_eq!(head_text.matches("endpoint").count(), 0);
        assert_eq!(head_text.as_bytes()[starts[0]], b' ');
    }

    #[test]
    fn endpoint_tables_the_cut_cannot_place_leave_the_block_whole() {
        for text in [
            // An endpoint's sub-table after another section.
            "[[profile]]\n[[profile.endpoint]]\n[profile.health]\n[profile.endpoint.headers]\n",
            // `endpoint` as one table.
            "[[profile]]\n[profile.endpoint]\naddress = \"x\"\n",
        ] {
            let s = split(text).expect("split");
            assert_eq!(s.profiles[0].runs, [], "{text:?}");
            assert_eq!(s.profiles[0].head(text), text);
        }
        // Endpoints that close the block: the head is its beginning, borrowed.
        let text = "[[profile]]\nname = \"a\"\n[[profile.endpoint]]\naddress = \"x\"\n";
        let s = split(text).expect("split");
        assert!(matches!(
            s.profiles[0].head(text),
            Cow::Borrowed("[[profile]]\nname = \"a\"\n")
        ));
    }
}
