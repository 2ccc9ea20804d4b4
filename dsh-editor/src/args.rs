//! Turning the model's JSON arguments into a typed request, with a precise
//! error for every wrong shape.

use serde_json::{Map, Value};

use crate::{EditorError, EditorRequest};

/// A request parsed from JSON, with the one error the contract reports
/// late: a malformed `view_range` is reported only when viewing a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub(crate) request: EditorRequest,
    pub(crate) bad_range: bool,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn string(obj: &Map<String, Value>, name: &'static str) -> Result<Option<String>, EditorError> {
    match field(obj, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(EditorError::WrongType {
            name,
            expected: "a string",
            got: type_name(other),
        }),
    }
}

fn integer(obj: &Map<String, Value>, name: &'static str) -> Result<Option<i64>, EditorError> {
    match field(obj, name) {
        None => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or(EditorError::WrongType {
            name,
            expected: "an integer",
            got: type_name(v),
        }),
    }
}

/// `view_range`'s own shape error is part of the contract, and reported only
/// when viewing a file, so it is carried beside the request.
fn view_range(obj: &Map<String, Value>) -> Option<Result<(i64, i64), EditorError>> {
    let v = field(obj, "view_range")?;
    Some(match v.as_array().map(Vec::as_slice) {
        Some([a, b]) => match (a.as_i64(), b.as_i64()) {
            (Some(a), Some(b)) => Ok((a, b)),
            _ => Err(EditorError::RangeShape),
        },
        _ => Err(EditorError::RangeShape),
    })
}

/// Parses the arguments of one call.
pub(crate) fn parse(args: &Value) -> Result<Parsed, EditorError> {
    let obj = args.as_object().ok_or(EditorError::NotAnObject)?;
    let command = string(obj, "command")?.ok_or(EditorError::MissingParameter("command"))?;
    let path = string(obj, "path")?.ok_or(EditorError::MissingParameter("path"))?;
    let mut bad_range = false;
    let request = match command.as_str() {
        "view" => EditorRequest::View {
            path,
            view_range: match view_range(obj) {
                None => None,
                Some(Ok(range)) => Some(range),
                Some(Err(_)) => {
                    bad_range = true;
                    None
                }
            },
        },
        "create" => EditorRequest::Create {
            path,
            file_text: string(obj, "file_text")?,
        },
        "str_replace" => EditorRequest::StrReplace {
            path,
            old_str: string(obj, "old_str")?,
            new_str: string(obj, "new_str")?,
        },
        "insert" => {
            let new_str = match string(obj, "new_str")? {
                Some(s) => Some(s),
                // One popular model sends `insert_text`; errors still say `new_str`.
                None => string(obj, "insert_text").map_err(|_| EditorError::WrongType {
                    name: "new_str",
                    expected: "a string",
                    got: obj.get("insert_text").map_or("null", type_name),
                })?,
            };
            EditorRequest::Insert {
                path,
                insert_line: integer(obj, "insert_line")?,
                new_str,
            }
        }
        _ => return Err(EditorError::UnknownCommand(command)),
    };
    Ok(Parsed { request, bad_range })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn precise_errors_for_wrong_shapes() {
        let cases = [
            (
                json!([1]),
                "The tool arguments must be a JSON object with at least `command` and `path`.",
            ),
            (json!({"path": "/a"}), "Parameter `command` is required."),
            (json!({"command": "view"}), "Parameter `path` is required."),
            (
                json!({"command": 3, "path": "/a"}),
                "Parameter `command` must be a string, but got an integer.",
            ),
            (
                json!({"command": "delete", "path": "/a"}),
                "Unrecognized command `delete`. The allowed commands for the str_replace_editor tool are: `view`, `create`, `str_replace`, `insert`.",
            ),
            (
                json!({"command": "insert", "path": "/a", "insert_line": "3"}),
                "Parameter `insert_line` must be an integer, but got a string.",
            ),
            (
                json!({"command": "insert", "path": "/a", "insert_line": 1.5}),
                "Parameter `insert_line` must be an integer, but got a number.",
            ),
            (
                json!({"command": "create", "path": "/a", "file_text": ["x"]}),
                "Parameter `file_text` must be a string, but got an array.",
            ),
            (
                json!({"command": "insert", "path": "/a", "insert_text": 5}),
                "Parameter `new_str` must be a string, but got an integer.",
            ),
        ];
        for (args, want) in cases {
            let err = parse(&args).unwrap_err();
            assert_eq!(crate::contract::render_error(&err), want, "{args}");
        }
    }

    #[test]
    fn nulls_are_absent_and_insert_text_is_an_alias() {
        let r = parse(&json!({"command": "insert", "path": "/a", "insert_line": 0, "new_str": null, "insert_text": "x"})).unwrap();
        assert_eq!(r.request, EditorRequest::insert("/a", 0, "x"));
        let r =
            parse(&json!({"command": "view", "path": "/a", "view_range": [1, "2"], "extra": 1}))
                .unwrap();
        assert_eq!(r.request, EditorRequest::view("/a"));
        assert!(r.bad_range);
    }
}
