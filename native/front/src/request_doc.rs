//! An infer request's JSON read straight into what the front checks (accept.rs), without
//! building a `serde_json::Value` tree first: no map or string per key, one list per input's
//! data. Only the shape the front takes is read: any other key, a key twice, a value of another
//! type (a null id, nested data, a float shape) fails the read, and the request is forwarded
//! whole for `thaw serve` to answer in its own words.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// One element of an input's `data`, as JSON wrote it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    Bool(bool),
    /// A negative integer.
    I64(i64),
    /// A non-negative integer.
    U64(u64),
    F64(f64),
}

/// An input of the request.
#[derive(Debug, Default)]
pub struct InputDoc {
    pub name: String,
    pub datatype: String,
    pub shape: Vec<i64>,
    /// `data`, if given.
    pub data: Option<Vec<Scalar>>,
    /// `parameters.binary_data_size`, if given (the only parameter the front takes).
    pub binary_size: Option<u64>,
}

/// A requested output: its name, and its own `parameters.binary_data` if given.
#[derive(Debug)]
pub struct OutputDoc {
    pub name: String,
    pub binary: Option<bool>,
}

/// The request's JSON part.
#[derive(Debug, Default)]
pub struct RequestDoc {
    pub id: Option<String>,
    pub inputs: Vec<InputDoc>,
    pub outputs: Option<Vec<OutputDoc>>,
    /// `parameters.binary_data_output`, if given (the only parameter the front takes).
    pub binary_default: Option<bool>,
}

/// The request's JSON part, if it has only the shape the front takes.
pub fn read(json: &[u8]) -> Option<RequestDoc> {
    let mut reader = serde_json::Deserializer::from_slice(json);
    let doc = (&mut reader).deserialize_map(RequestVisitor).ok()?;
    reader.end().ok()?;
    Some(doc)
}

/// A key of one of the objects read here, matched against the names that object allows
/// (without keeping it: an escaped key costs no allocation either).
struct Key<'n> {
    allowed: &'n [&'n str],
}

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = usize;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for Key<'_> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "one of {:?}", self.allowed)
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<usize, E> {
        self.allowed
            .iter()
            .position(|name| *name == key)
            .ok_or_else(|| E::custom("a key the front does not take"))
    }
}

/// Each key of a map at most once: `seen` marks it.
fn once<E: de::Error>(seen: &mut u8, index: usize) -> Result<(), E> {
    let bit = 1u8 << index;
    if *seen & bit != 0 {
        return Err(E::custom("a key twice"));
    }
    *seen |= bit;
    Ok(())
}

/// `{"<name>": <T>}`: an object with that one key.
struct OneKey<T> {
    name: &'static str,
    value: std::marker::PhantomData<T>,
}

fn one_key<T>(name: &'static str) -> OneKey<T> {
    OneKey {
        name,
        value: std::marker::PhantomData,
    }
}

impl<'de, T: de::Deserialize<'de>> DeserializeSeed<'de> for OneKey<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, T: de::Deserialize<'de>> Visitor<'de> for OneKey<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object of {:?} alone", self.name)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let allowed = [self.name];
        let Some(_) = map.next_key_seed(Key { allowed: &allowed })? else {
            return Err(de::Error::custom("an empty object"));
        };
        let value = map.next_value()?;
        match map.next_key_seed(Key { allowed: &[] })? {
            None => Ok(value),
            Some(_) => Err(de::Error::custom("more than one key")),
        }
    }
}

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = RequestDoc;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an infer request")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestDoc, A::Error> {
        const KEYS: [&str; 4] = ["id", "inputs", "outputs", "parameters"];
        let (mut doc, mut seen, mut inputs) = (RequestDoc::default(), 0u8, None);
        while let Some(key) = map.next_key_seed(Key { allowed: &KEYS })? {
            once(&mut seen, key)?;
            match key {
                0 => doc.id = Some(map.next_value()?),
                1 => inputs = Some(map.next_value_seed(ListOf(Input))?),
                2 => doc.outputs = Some(map.next_value_seed(ListOf(Output))?),
                _ => doc.binary_default = Some(map.next_value_seed(one_key("binary_data_output"))?),
            }
        }
        doc.inputs = inputs.ok_or_else(|| de::Error::custom("no inputs"))?;
        Ok(doc)
    }
}

/// A JSON list whose every element `S` reads.
#[derive(Clone, Copy)]
struct ListOf<S>(S);

impl<'de, S: DeserializeSeed<'de> + Copy> DeserializeSeed<'de> for ListOf<S> {
    type Value = Vec<S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, S: DeserializeSeed<'de> + Copy> Visitor<'de> for ListOf<S> {
    type Value = Vec<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(2));
        while let Some(item) = seq.next_element_seed(self.0)? {
            items.push(item);
        }
        Ok(items)
    }
}

#[derive(Clone, Copy)]
struct Input;

impl<'de> DeserializeSeed<'de> for Input {
    type Value = InputDoc;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<InputDoc, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Input {
    type Value = InputDoc;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an input")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InputDoc, A::Error> {
        const KEYS: [&str; 5] = ["name", "datatype", "shape", "data", "parameters"];
        let (mut input, mut seen) = (InputDoc::default(), 0u8);
        while let Some(key) = map.next_key_seed(Key { allowed: &KEYS })? {
            once(&mut seen, key)?;
            match key {
                0 => input.name = map.next_value()?,
                1 => input.datatype = map.next_value()?,
                2 => input.shape = map.next_value()?,
                3 => input.data = Some(map.next_value()?),
                _ => input.binary_size = Some(map.next_value_seed(one_key("binary_data_size"))?),
            }
        }
        if seen & 0b111 != 0b111 {
            return Err(de::Error::custom(
                "an input without its name, datatype or shape",
            ));
        }
        Ok(input)
    }
}

#[derive(Clone, Copy)]
struct Output;

impl<'de> DeserializeSeed<'de> for Output {
    type Value = OutputDoc;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<OutputDoc, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Output {
    type Value = OutputDoc;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an output")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OutputDoc, A::Error> {
        const KEYS: [&str; 2] = ["name", "parameters"];
        let (mut name, mut binary, mut seen) = (None, None, 0u8);
        while let Some(key) = map.next_key_seed(Key { allowed: &KEYS })? {
            once(&mut seen, key)?;
            match key {
                0 => name = Some(map.next_value()?),
                _ => binary = Some(map.next_value_seed(one_key("binary_data"))?),
            }
        }
        let name = name.ok_or_else(|| de::Error::custom("an output without its name"))?;
        Ok(OutputDoc { name, binary })
    }
}

impl<'de> de::Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Scalar, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl Visitor<'_> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number or a boolean")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
        Ok(Scalar::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar::I64(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar::U64(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar::F64(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shape_the_front_takes() {
        let doc = read(
            br#"{"id":"r\u0031","inputs":[{"name":"A","datatype":"FP32","shape":[2],
                "data":[1,-2.5]},{"name":"B","datatype":"BOOL","shape":[1],"data":[true],
                "parameters":{"binary_data_size":1}}],"outputs":[{"name":"Y",
                "parameters":{"binary_data":true}},{"name":"Z"}],
                "parameters":{"binary_data_output":false}} "#,
        )
        .unwrap();
        assert_eq!(doc.id.as_deref(), Some("r1"));
        assert_eq!(doc.binary_default, Some(false));
        assert_eq!(
            doc.inputs[0].data,
            Some(vec![Scalar::U64(1), Scalar::F64(-2.5)])
        );
        assert_eq!(doc.inputs[1].data, Some(vec![Scalar::Bool(true)]));
        assert_eq!(doc.inputs[1].binary_size, Some(1));
        let outputs = doc.outputs.unwrap();
        assert_eq!(
            (outputs[0].name.as_str(), outputs[0].binary),
            ("Y", Some(true))
        );
        assert_eq!((outputs[1].name.as_str(), outputs[1].binary), ("Z", None));
    }

    #[test]
    fn fails_on_anything_else() {
        let input = r#"{"name":"A","datatype":"FP32","shape":[1],"data":[1]}"#;
        let cases = [
            format!(r#"{{"id":null,"inputs":[{input}]}}"#),
            format!(r#"{{"id":"a","id":"b","inputs":[{input}]}}"#),
            format!(r#"{{"inputs":[{input}],"inputs":[{input}]}}"#),
            format!(r#"{{"inputs":[{input}],"extra":1}}"#),
            format!(r#"{{"inputs":[{input}],"parameters":{{}}}}"#),
            format!(r#"{{"inputs":[{input}],"parameters":{{"binary_data_output":1}}}}"#),
            format!(r#"{{"inputs":[{input}],"parameters":{{"binary_data_output":true,"x":1}}}}"#),
            format!(
                r#"{{"inputs":[{input}],"outputs":[{{"parameters":{{"binary_data":true}}}}]}}"#
            ),
            format!(r#"{{"inputs":[{input}]}} x"#),
            input.replace("[1]}", "[[1]]}"),
            input.replace("[1]}", r#"["1"]}"#),
            input.replace("[1]}", "[null]}"),
            input.replace(r#""shape":[1]"#, r#""shape":[1.0]"#),
            input.replace(r#""name":"A","#, ""),
            r#"{"outputs":[]}"#.to_string(),
            "[]".to_string(),
        ];
        for case in cases {
            let wrapped = if case.starts_with(r#"{"name""#) || case.starts_with(r#"{"datatype""#) {
                format!(r#"{{"inputs":[{case}]}}"#)
            } else {
                case
            };
            assert!(read(wrapped.as_bytes()).is_none(), "{wrapped}");
        }
    }
}
