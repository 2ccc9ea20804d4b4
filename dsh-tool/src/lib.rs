#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

use serde_json::{Map, Value, json};

/// The note the shell and the editor append, without a separator, to
/// output they cut at their `max_output_chars`: the words of the
/// `str_replace_editor` contract, the same for both tools.
pub const CLIP_NOTE: &str = "<response clipped><NOTE>To save on context only part of this file has been shown to you. You should retry this tool after you have searched inside the file with `grep -n` in order to find the line numbers of what you are looking for.</NOTE>";

/// The JSON crate of the rendered definitions, re-exported so a host needs
/// no matching version of its own.
pub use serde_json;

/// A tool as a model is offered it: its name, what it does, and its
/// parameters (a JSON object's members, in the order given).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// Its arguments.
    pub parameters: Vec<Parameter>,
}

/// One member of a tool's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Parameter {
    /// The member's name.
    pub name: String,
    /// Its type.
    pub kind: Kind,
    /// What it means, for the model.
    pub description: String,
    /// Whether every call must give it.
    pub required: bool,
}

/// A parameter's JSON type.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A string.
    String,
    /// A string that is one of these values.
    OneOf(Vec<String>),
    /// An integer.
    Integer,
    /// A boolean.
    Boolean,
    /// An array whose items are of this kind.
    Array(Box<Kind>),
}

impl Kind {
    /// One of `values`.
    pub fn one_of<S: Into<String>>(values: impl IntoIterator<Item = S>) -> Self {
        Kind::OneOf(values.into_iter().map(Into::into).collect())
    }

    /// An array of `items`.
    pub fn array_of(items: Kind) -> Self {
        Kind::Array(Box::new(items))
    }

    fn schema(&self) -> Map<String, Value> {
        let mut map = Map::new();
        match self {
            Kind::String => {
                map.insert("type".into(), json!("string"));
            }
            Kind::OneOf(values) => {
                map.insert("type".into(), json!("string"));
                map.insert("enum".into(), json!(values));
            }
            Kind::Integer => {
                map.insert("type".into(), json!("integer"));
            }
            Kind::Boolean => {
                map.insert("type".into(), json!("boolean"));
            }
            Kind::Array(items) => {
                map.insert("type".into(), json!("array"));
                map.insert("items".into(), Value::Object(items.schema()));
            }
        }
        map
    }
}

impl Parameter {
    /// A parameter every call must give.
    pub fn required(name: impl Into<String>, kind: Kind, description: impl Into<String>) -> Self {
        Parameter {
            name: name.into(),
            kind,
            description: description.into(),
            required: true,
        }
    }

    /// A parameter a call may leave out.
    pub fn optional(name: impl Into<String>, kind: Kind, description: impl Into<String>) -> Self {
        Parameter {
            required: false,
            ..Parameter::required(name, kind, description)
        }
    }
}

impl ToolSpec {
    /// A tool without parameters yet.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: Vec::new(),
        }
    }

    /// Adds `parameter` (replacing one of the same name).
    pub fn parameter(mut self, parameter: Parameter) -> Self {
        match self
            .parameters
            .iter_mut()
            .find(|p| p.name == parameter.name)
        {
            Some(existing) => *existing = parameter,
            None => self.parameters.push(parameter),
        }
        self
    }

    /// Replaces the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// The parameter called `name`.
    pub fn get(&self, name: &str) -> Option<&Parameter> {
        self.parameters.iter().find(|p| p.name == name)
    }

    /// The JSON Schema of the arguments: an object type with one property
    /// per parameter and the required ones listed.
    ///
    /// ```
    /// use dsh_tool::{Kind, Parameter, ToolSpec};
    /// let spec = ToolSpec::new("t", "d")
    ///     .parameter(Parameter::optional("lines", Kind::array_of(Kind::Integer), "Which lines."));
    /// assert_eq!(
    ///     serde_json::Value::Object(spec.json_schema()),
    ///     serde_json::json!({
    ///         "type": "object",
    ///         "properties": {"lines": {"type": "array", "items": {"type": "integer"}, "description": "Which lines."}},
    ///         "required": [],
    ///     })
    /// );
    /// ```
    pub fn json_schema(&self) -> Map<String, Value> {
        let properties: Map<String, Value> = self
            .parameters
            .iter()
            .map(|p| {
                let mut schema = p.kind.schema();
                schema.insert("description".into(), json!(p.description));
                (p.name.clone(), Value::Object(schema))
            })
            .collect();
        let required: Vec<&str> = self
            .parameters
            .iter()
            .filter(|p| p.required)
            .map(|p| p.name.as_str())
            .collect();
        let mut schema = Map::new();
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), Value::Object(properties));
        schema.insert("required".into(), json!(required));
        schema
    }

    /// The OpenAI function shape: `{"name", "description", "parameters"}`.
    pub fn openai(&self) -> Value {
        self.shaped("parameters")
    }

    /// The Anthropic Messages API shape: `{"name", "description",
    /// "input_schema"}`.
    pub fn anthropic(&self) -> Value {
        self.shaped("input_schema")
    }

    /// The MCP `tools/list` shape: `{"name", "description", "inputSchema"}`.
    pub fn mcp(&self) -> Value {
        self.shaped("inputSchema")
    }

    fn shaped(&self, key: &str) -> Value {
        let mut map = Map::new();
        map.insert("name".into(), json!(self.name));
        map.insert("description".into(), json!(self.description));
        map.insert(key.into(), Value::Object(self.json_schema()));
        Value::Object(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_of_the_same_name_replaces_the_first() {
        let spec = ToolSpec::new("t", "d")
            .parameter(Parameter::required("a", Kind::String, "one"))
            .parameter(Parameter::optional("a", Kind::Integer, "two"));
        assert_eq!(spec.parameters.len(), 1);
        assert_eq!(spec.get("a").map(|p| p.required), Some(false));
        assert_eq!(spec.json_schema()["required"], json!([]));
        assert_eq!(spec.json_schema()["properties"]["a"]["type"], "integer");
    }

    #[test]
    fn the_three_shapes_differ_only_in_the_key_of_the_arguments() {
        let spec = ToolSpec::new("t", "d").parameter(Parameter::required(
            "mode",
            Kind::one_of(["x", "y"]),
            "m",
        ));
        for (shape, key) in [
            (spec.openai(), "parameters"),
            (spec.anthropic(), "input_schema"),
            (spec.mcp(), "inputSchema"),
        ] {
            let object = shape.as_object().cloned().unwrap_or_default();
            assert_eq!(object.len(), 3, "{shape}");
            assert_eq!(shape["name"], "t");
            assert_eq!(shape["description"], "d");
            assert_eq!(shape[key], Value::Object(spec.json_schema()));
        }
        assert_eq!(
            spec.json_schema()["properties"]["mode"]["enum"],
            json!(["x", "y"])
        );
    }
}
