//! JSON bodies that must be objects. serde reads a struct from a JSON
//! array as readily as from an object (its fields in order), so `["v"]`
//! would pass for `{"value": "v"}` and `[]` for `{}`. Every body the API
//! takes is an object: [`Json`] (the extractor) and [`from_slice`] (for a
//! body read whole) refuse anything else before its fields are read.

use std::marker::PhantomData;

use actix_web::{web, FromRequest, HttpRequest};
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use crate::web::error::ApiError;

/// `T`, read only from a JSON object.
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Object<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Object)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// Reads a body that must be a JSON object into `T`; an array, a string or
/// anything else is a 400 saying so.
pub fn from_slice<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice::<Object<T>>(body)
        .map(|o| o.0)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// The extractor of a JSON object body: `web::Json` (its content type,
/// size limit and error answers) that refuses anything but an object.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T> Json<T> {
    /// The body read.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for Json<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for Json<T> {
    type Error = actix_web::Error;
    type Future = futures::future::LocalBoxFuture<'static, Result<Self, actix_web::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut actix_web::dev::Payload) -> Self::Future {
        let read = web::Json::<Object<T>>::from_request(req, payload);
        Box::pin(async move { read.await.map(|j| Json(j.into_inner().0)) })
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Secret {
        value: String,
    }

    #[test]
    fn only_an_object_is_read() {
        let s: Secret = super::from_slice(br#"{"value": "v"}"#).unwrap();
        assert_eq!(s.value, "v");
        for bad in [&br#"["v"]"#[..], b"[]", b"\"v\"", b"1", b"null"] {
            let e = super::from_slice::<Secret>(bad).unwrap_err();
            assert!(e.message.contains("expected a JSON object"), "{e}");
        }
        let e = super::from_slice::<Secret>(br#"{"value": "v", "x": 1}"#).unwrap_err();
        assert!(e.message.contains("unknown field `x`"), "{e}");
    }
}
