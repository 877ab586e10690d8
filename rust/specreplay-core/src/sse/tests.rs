use super::*;

fn parse_reads(reads: &[&[u8]]) -> (Vec<SseEvent>, Option<SseEvent>) {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    for r in reads {
        p.feed(r, &mut out).unwrap();
    }
    let tail = p.finish().unwrap();
    (out, tail)
}

fn datas(events: &[SseEvent]) -> Vec<&str> {
    events.iter().map(|e| e.data.as_str()).collect()
}

fn ev(data: &str) -> SseEvent {
    SseEvent {
        data: data.into(),
        ..Default::default()
    }
}

#[test]
fn lf_line_endings() {
    let (evs, tail) = parse_reads(&[b"data: a\n\ndata: b\n\n"]);
    assert_eq!(evs, vec![ev("a"), ev("b")]);
    assert_eq!(tail, None);
}

#[test]
fn crlf_line_endings() {
    let (evs, _) = parse_reads(&[b"data: a\r\n\r\ndata: b\r\n\r\n"]);
    assert_eq!(datas(&evs), ["a", "b"]);
}

#[test]
fn lone_cr_line_endings() {
    let (evs, _) = parse_reads(&[b"data: a\r\rdata: b\r\r"]);
    assert_eq!(datas(&evs), ["a", "b"]);
}

#[test]
fn mixed_line_endings() {
    let (evs, _) = parse_reads(&[b"data: a\r\ndata: b\rdata: c\n\r\n"]);
    assert_eq!(datas(&evs), ["a\nb\nc"]);
}

#[test]
fn crlf_split_across_reads_is_one_line_end() {
    // Were the LF taken for a second line end, the two data lines would be
    // separated by a blank line and dispatch as two events.
    let (evs, _) = parse_reads(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
    assert_eq!(datas(&evs), ["a\nb"]);
}

#[test]
fn cr_at_end_of_read_followed_by_other_byte() {
    let (evs, _) = parse_reads(&[b"data: a\r", b"\r"]);
    assert_eq!(datas(&evs), ["a"]);
}

#[test]
fn cr_then_empty_read_then_lf() {
    let (evs, _) = parse_reads(&[b"data: a\r", b"", b"\ndata: b\n\n"]);
    assert_eq!(datas(&evs), ["a\nb"]);
}

#[test]
fn bom_stripped_once() {
    let (evs, _) = parse_reads(&[b"\xEF\xBB\xBFdata: a\n\n"]);
    assert_eq!(datas(&evs), ["a"]);
    // A second BOM is part of the field name, which then matches nothing.
    let (evs, _) = parse_reads(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n"]);
    assert_eq!(datas(&evs), ["b"]);
}

#[test]
fn bom_split_across_reads() {
    let (evs, _) = parse_reads(&[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"]);
    assert_eq!(datas(&evs), ["a"]);
    let (evs, _) = parse_reads(&[b"\xEF\xBB", b"\xBF", b"data: a\n\n"]);
    assert_eq!(datas(&evs), ["a"]);
}

#[test]
fn bom_lookalike_is_text() {
    // EF BB 80 is U+FEC0, not a BOM: the bytes must survive as data.
    let (evs, _) = parse_reads(&[b"data: x\n\n", b"data:\xEF\xBB\x80\n\n"]);
    assert_eq!(datas(&evs), ["x", "\u{FEC0}"]);
    let mut bytes = b"\xEF\xBB\x80: c\ndata: y\n\n".to_vec();
    for split in 0..bytes.len() {
        let (a, b) = bytes.split_at(split);
        let (evs, _) = parse_reads(&[a, b]);
        assert_eq!(datas(&evs), ["y"], "split at {split}");
    }
    bytes.truncate(2);
    let mut p = SseParser::new();
    p.feed(&bytes, &mut Vec::new()).unwrap();
    // Two lone BOM bytes at EOF are an unterminated (invalid UTF-8) line.
    assert_eq!(p.finish(), Err(SseError::InvalidUtf8 { line: 1 }));
}

#[test]
fn comments_are_ignored() {
    let (evs, _) = parse_reads(&[b": keep-alive\n\n:\ndata: a\n: mid-event\ndata: b\n\n"]);
    assert_eq!(datas(&evs), ["a\nb"]);
}

#[test]
fn multi_line_data_joined_with_lf() {
    let (evs, _) = parse_reads(&[b"data: a\ndata:\ndata: c\n\n"]);
    assert_eq!(datas(&evs), ["a\n\nc"]);
}

#[test]
fn field_without_colon_has_empty_value() {
    // `data` alone adds an empty line; the first `data` line adds nothing
    // visible but the second one's separator does.
    let (evs, _) = parse_reads(&[b"data\ndata\ndata: x\n\nevent\ndata: y\n\n"]);
    assert_eq!(evs, vec![ev("\n\nx"), ev("y")]);
}

#[test]
fn exactly_one_space_stripped() {
    let (evs, _) = parse_reads(&[b"data:  two\n\ndata:none\n\ndata:\tx\n\n"]);
    assert_eq!(datas(&evs), [" two", "none", "\tx"]);
}

#[test]
fn empty_data_is_not_dispatched() {
    let (evs, tail) = parse_reads(&[b"event: ping\n\ndata:\n\nid: 1\n\n\n\ndata: real\n\n"]);
    assert_eq!(evs.len(), 1);
    assert_eq!(evs[0].data, "real");
    // The skipped block's event name must not leak into the next event.
    assert_eq!(evs[0].event, None);
    assert_eq!(evs[0].id.as_deref(), Some("1"));
    assert_eq!(tail, None);
}

#[test]
fn event_name_id_and_retry() {
    let (evs, _) =
        parse_reads(&[b"event: message_start\nid: 7\nretry: 1500\ndata: {}\n\ndata: 2\n\n"]);
    assert_eq!(
        evs[0],
        SseEvent {
            event: Some("message_start".into()),
            data: "{}".into(),
            id: Some("7".into()),
            retry: Some(1500)
        }
    );
    // id persists across events; retry is reported once.
    assert_eq!(
        evs[1],
        SseEvent {
            event: None,
            data: "2".into(),
            id: Some("7".into()),
            retry: None
        }
    );
}

#[test]
fn retry_must_be_all_digits() {
    for bad in [
        "retry: 12a",
        "retry: -5",
        "retry: ",
        "retry: 1.5",
        "retry: 99999999999999999999999",
    ] {
        let input = format!("{bad}\ndata: x\n\n");
        let (evs, _) = parse_reads(&[input.as_bytes()]);
        assert_eq!(evs[0].retry, None, "{bad}");
    }
}

#[test]
fn id_with_nul_is_ignored_and_empty_id_resets() {
    let (evs, _) = parse_reads(&[b"id: a\ndata: 1\n\nid: b\0c\ndata: 2\n\nid\ndata: 3\n\n"]);
    let ids: Vec<_> = evs.iter().map(|e| e.id.as_deref()).collect();
    assert_eq!(ids, [Some("a"), Some("a"), None]);
}

#[test]
fn unknown_fields_ignored() {
    let (evs, _) = parse_reads(&[b"foo: bar\nDATA: no\ndata : no\ndata: yes\n\n"]);
    assert_eq!(datas(&evs), ["yes"]);
}

#[test]
fn finish_returns_unterminated_event() {
    let (evs, tail) = parse_reads(&[b"data: a\n\ndata: {\"partial\"\n"]);
    assert_eq!(datas(&evs), ["a"]);
    assert_eq!(tail, Some(ev("{\"partial\"")));
    // Also when the last line itself has no line end.
    let (_, tail) = parse_reads(&[b"event: x\ndata: b"]);
    assert_eq!(
        tail,
        Some(SseEvent {
            event: Some("x".into()),
            data: "b".into(),
            ..Default::default()
        })
    );
}

#[test]
fn finish_resets_for_reuse() {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    p.feed(b"\xEF\xBB\xBFdata: a", &mut out).unwrap();
    assert_eq!(p.finish().unwrap(), Some(ev("a")));
    p.feed(b"\xEF\xBB\xBFdata: b\n\n", &mut out).unwrap();
    assert_eq!(datas(&out), ["b"]);
    assert_eq!(p.finish().unwrap(), None);
}

#[test]
fn multibyte_utf8_split_across_reads() {
    let text = "data: é—🙂\n\n".as_bytes();
    for split in 0..=text.len() {
        let (a, b) = text.split_at(split);
        let (evs, _) = parse_reads(&[a, b]);
        assert_eq!(datas(&evs), ["é—🙂"], "split at {split}");
    }
}

#[test]
fn invalid_utf8_reports_line() {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    let err = p.feed(b"data: ok\n\ndata: \xFF\n\n", &mut out).unwrap_err();
    assert_eq!(err, SseError::InvalidUtf8 { line: 3 });
    assert_eq!(datas(&out), ["ok"], "events before the bad line are kept");
    // Sticky: the stream cannot be trusted afterwards.
    assert_eq!(p.feed(b"data: x\n\n", &mut out), Err(err.clone()));
    assert_eq!(p.finish(), Err(err));
}

#[test]
fn invalid_utf8_line_count_spans_reads_and_endings() {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    p.feed(b"data: a\r", &mut out).unwrap();
    p.feed(b"\n\r\n: c\r", &mut out).unwrap();
    assert_eq!(
        p.feed(b"data: \xC3\x28\n", &mut out),
        Err(SseError::InvalidUtf8 { line: 4 })
    );
}

#[test]
fn invalid_utf8_in_unterminated_last_line() {
    let mut p = SseParser::new();
    p.feed(b"data: a\n\ndata: \xE2\x82", &mut Vec::new())
        .unwrap();
    assert_eq!(p.finish(), Err(SseError::InvalidUtf8 { line: 3 }));
}

#[test]
fn oversized_event_rejected() {
    let mut p = SseParser::with_max_event_bytes(16);
    let mut out = Vec::new();
    p.feed(b"data: 0123456789\n\n", &mut out).unwrap();
    let err = p
        .feed(b"data: 0123456789\ndata: 0123456789\n\n", &mut out)
        .unwrap_err();
    assert_eq!(err, SseError::EventTooLarge { limit: 16 });
    assert_eq!(out.len(), 1);
}

#[test]
fn oversized_unterminated_line_rejected() {
    // A server that never sends a line end must not grow memory without bound.
    let mut p = SseParser::with_max_event_bytes(32);
    let mut out = Vec::new();
    let chunk = [b'x'; 20];
    p.feed(&chunk, &mut out).unwrap();
    assert_eq!(
        p.feed(&chunk, &mut out),
        Err(SseError::EventTooLarge { limit: 32 })
    );
}

#[test]
fn one_byte_reads_match_whole() {
    let input: &[u8] = b"\xEF\xBB\xBF: hi\r\nevent: e\r\nid: 9\rdata: \xC3\xA9\r\n\r\ndata: 2\n\n";
    let (whole, _) = parse_reads(&[input]);
    let reads: Vec<&[u8]> = input.chunks(1).collect();
    let (bytewise, _) = parse_reads(&reads);
    assert_eq!(whole, bytewise);
    assert_eq!(whole.len(), 2);
    assert_eq!(whole[0].data, "é");
}
