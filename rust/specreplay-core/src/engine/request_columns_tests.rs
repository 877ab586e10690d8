//! `requests_from_batch`: columns, bodies, sessions and their errors.

use arrow_array::builder::{Int64Builder, ListBuilder, StructBuilder, UInt64Builder};
use arrow_array::ArrayRef;
use arrow_schema::Schema;

use super::*;

fn batch(columns: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    let arrays = columns.into_iter().map(|(_, a)| a).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}

fn good() -> Vec<(&'static str, ArrayRef)> {
    vec![
        ("trace_id", Arc::new(StringArray::from(vec!["a", "b"]))),
        (
            "api",
            Arc::new(StringArray::from(vec!["chat", "completions"])),
        ),
        (
            "url",
            Arc::new(StringArray::from(vec![
                "http://h/v1/chat/completions",
                "https://h/v1/completions",
            ])),
        ),
        (
            "body",
            Arc::new(BinaryArray::from(vec![b"{}".as_ref(), b"{\"x\":1}"])),
        ),
        ("arrival_s", Arc::new(Float64Array::from(vec![0.0, 1.5]))),
    ]
}

fn message(columns: Vec<(&str, ArrayRef)>) -> String {
    requests_from_batch(&batch(columns))
        .unwrap_err()
        .to_string()
}

#[test]
fn rows_become_requests() {
    let requests = requests_from_batch(&batch(good())).unwrap();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].trace_id, "b");
    assert_eq!(requests[1].dialect.as_str(), "completions");
    assert_eq!(requests[1].uri.host(), Some("h"));
    assert_eq!(&requests[1].body[..], b"{\"x\":1}");
    assert_eq!(requests[1].arrival_s, 1.5);
    assert!(requests[1].session.is_none());
}

#[test]
fn session_columns_become_turns() {
    let mut columns = good();
    columns.push((
        "session_id",
        Arc::new(StringArray::from(vec![Some("s"), None])),
    ));
    columns.push((
        "turn_index",
        Arc::new(Int32Array::from(vec![Some(1), None])),
    ));
    columns.push((
        "think_time_us",
        Arc::new(Int64Array::from(vec![Some(2500), None])),
    ));
    let requests = requests_from_batch(&batch(columns)).unwrap();
    let turn = requests[0].session.as_ref().unwrap();
    assert_eq!(
        (&*turn.session_id, turn.index, turn.think_time_us),
        ("s", 1, Some(2500))
    );
    assert!(requests[1].session.is_none());
}

fn blocks(rows: &[Option<(i64, i64, &[u64])>]) -> ArrayRef {
    let DataType::Struct(fields) = prompt_blocks_type() else {
        unreachable!()
    };
    let mut b = StructBuilder::from_fields(fields, rows.len());
    for row in rows {
        let (tokens, size, ids) = row.unwrap_or((0, 0, &[]));
        b.field_builder::<Int64Builder>(0)
            .unwrap()
            .append_value(tokens);
        b.field_builder::<Int64Builder>(1)
            .unwrap()
            .append_value(size);
        let list = b
            .field_builder::<ListBuilder<Box<dyn arrow_array::builder::ArrayBuilder>>>(2)
            .unwrap();
        for id in ids {
            list.values()
                .as_any_mut()
                .downcast_mut::<UInt64Builder>()
                .unwrap()
                .append_value(*id);
        }
        list.append(true);
        b.field_builder::<UInt64Builder>(3).unwrap().append_value(0);
        b.append(row.is_some());
    }
    Arc::new(b.finish())
}

#[test]
fn prompt_blocks_are_synthesized_into_the_body() {
    let mut columns = good();
    let template = br#"{"messages":[{"role":"user","content":""}]}"#;
    let at = template.windows(2).position(|w| w == b"\"\"").unwrap() as i64 + 1;
    columns[3].1 = Arc::new(BinaryArray::from(vec![template.as_ref(), b"{}"]));
    columns.push(("prompt_blocks", blocks(&[Some((12, 8, &[0, 1])), None])));
    columns.push((
        "prompt_at",
        Arc::new(Int64Array::from(vec![Some(at), None])),
    ));
    let requests = requests_from_batch(&batch(columns)).unwrap();
    let body: serde_json::Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(
        body["messages"][0]["content"],
        "if door shop four corn like us word day has sky long"
    );
    assert_eq!(&requests[1].body[..], b"{}");
}

#[test]
fn errors_name_the_column() {
    let mut missing = good();
    missing.remove(3);
    assert!(message(missing).contains("requests: body: missing column"));

    let mut wrong = good();
    wrong[3].1 = Arc::new(StringArray::from(vec!["{}", "{}"]));
    assert!(message(wrong).contains("requests: body: expected Binary, got Utf8"));

    let mut extra = good();
    extra.push(("session", Arc::new(StringArray::from(vec!["s", "s"]))));
    assert!(message(extra).contains("requests: session: unknown column"));

    let mut nulls = good();
    nulls[4].1 = Arc::new(Float64Array::from(vec![Some(0.0), None]));
    assert!(message(nulls).contains("requests: arrival_s: must not contain nulls"));

    let mut api = good();
    api[1].1 = Arc::new(StringArray::from(vec!["chat", "grpc"]));
    assert!(message(api).contains("request b: api"));

    let mut no_turn = good();
    no_turn.push((
        "session_id",
        Arc::new(StringArray::from(vec![Some("s"), None])),
    ));
    assert!(message(no_turn).contains("request a: turn_index: missing"));

    let mut bad_blocks = good();
    bad_blocks[3].1 = Arc::new(BinaryArray::from(vec![br#"{"p":""}"#.as_ref(), b"{}"]));
    bad_blocks.push(("prompt_blocks", blocks(&[Some((2000, 512, &[0])), None])));
    bad_blocks.push(("prompt_at", Arc::new(Int64Array::from(vec![Some(6), None]))));
    assert!(message(bad_blocks).contains("request a: prompt_blocks.hash_ids: 1 blocks"));

    let history = |slots: Vec<Option<Vec<Option<i64>>>>| {
        let mut columns = good();
        columns.push(("session_id", Arc::new(StringArray::from(vec!["s", "s"]))));
        columns.push(("turn_index", Arc::new(Int32Array::from(vec![0, 1]))));
        let list = ListArray::from_iter_primitive::<arrow_array::types::Int64Type, _, _>(slots);
        columns.push(("history_at", Arc::new(list)));
        message(columns)
    };
    assert!(history(vec![None, Some(vec![Some(1)])])
        .contains("request b: history_at: byte 1 is not between the quotes"));
    assert!(history(vec![None, Some(vec![None, None])])
        .contains("request b: history_at: names a turn that is not before"));

    let mut no_at = good();
    no_at.push(("prompt_blocks", blocks(&[Some((12, 8, &[0, 1])), None])));
    assert!(message(no_at).contains("request a: prompt_at: missing"));
}
