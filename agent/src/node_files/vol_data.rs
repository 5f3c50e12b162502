//! kubelet's `vol_data.json`: the one place on a node that ties a CSI mount directory to
//! its volume handle, driver and lifecycle mode. kubelet writes it next to a pod's `mount/`
//! directory, next to a staging `globalmount/`, and under a raw-block volume's `data/`,
//! with Go's `json.NewEncoder(f).Encode(map[string]string)` (K8S `csi_util.go`).
//!
//! Real files can be empty (kubernetes/kubernetes#108217) or otherwise unreadable; every
//! such file is a [`VolDataError`] the caller counts and skips, never a panic.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// The contents of one `vol_data.json`. Every documented key (struct `volDataKey` in K8S
/// `csi_mounter.go`) is optional, because which ones are present depends on the location
/// (staging files hold only `volumeHandle`, `driverName` and maybe `seLinuxMountContext`)
/// and on the Kubernetes version (`seLinuxMountContext` since 1.25/1.26).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VolData {
    /// The spec name: the PV name, or the pod's volume name for an inline volume.
    #[serde(rename = "specVolID", skip_serializing_if = "Option::is_none")]
    pub spec_vol_id: Option<String>,
    #[serde(rename = "volumeHandle", skip_serializing_if = "Option::is_none")]
    pub volume_handle: Option<String>,
    #[serde(rename = "driverName", skip_serializing_if = "Option::is_none")]
    pub driver_name: Option<String>,
    #[serde(rename = "nodeName", skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// `csi-<sha256(handle + driver + node)>`, the VolumeAttachment's name.
    #[serde(rename = "attachmentID", skip_serializing_if = "Option::is_none")]
    pub attachment_id: Option<String>,
    /// `Persistent` or `Ephemeral`; absent for raw-block volumes.
    #[serde(rename = "volumeLifecycleMode", skip_serializing_if = "Option::is_none")]
    pub volume_lifecycle_mode: Option<String>,
    #[serde(rename = "seLinuxMountContext", skip_serializing_if = "Option::is_none")]
    pub selinux_mount_context: Option<String>,
    /// Keys this version does not know, kept so newer kubelets' additions are not lost.
    #[serde(flatten)]
    pub unknown: BTreeMap<String, String>,
}

/// Why a `vol_data.json` could not be read. The caller adds the file's path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VolDataError {
    /// Nothing but JSON whitespace (or 0 bytes): kubelet itself fails on it with `EOF`.
    #[error("empty: {len} bytes and no JSON value (kubelet reports EOF for this file too)")]
    Empty { len: usize },
    #[error("not valid JSON at line {line}, column {column}: {reason}")]
    Malformed { line: usize, column: usize, reason: String },
    #[error("a JSON {found}, not an object of strings")]
    NotAnObject { found: &'static str },
    #[error("key {key:?} holds a JSON {found}, not a string")]
    NonStringValue { key: String, found: &'static str },
}

/// Parses the bytes of a `vol_data.json`. Like kubelet's `json.Decoder.Decode`, only the
/// first JSON value counts and anything after it is ignored: a file kubelet can read is
/// one the agent can read. Duplicate keys: the last one wins, as in Go.
pub fn parse(bytes: &[u8]) -> Result<VolData, VolDataError> {
    if bytes.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        return Err(VolDataError::Empty { len: bytes.len() });
    }
    let map = match first_value(bytes)? {
        Value::Object(map) => map,
        other => return Err(VolDataError::NotAnObject { found: json_type(&other) }),
    };
    map.into_iter().try_fold(VolData::default(), |mut data, (key, value)| match value {
        Value::String(value) => {
            data.set(key, value);
            Ok(data)
        }
        other => Err(VolDataError::NonStringValue { key, found: json_type(&other) }),
    })
}

impl VolData {
    /// Stores one key: a documented key in its field, anything else in `unknown`.
    fn set(&mut self, key: String, value: String) {
        let field = match key.as_str() {
            "specVolID" => &mut self.spec_vol_id,
            "volumeHandle" => &mut self.volume_handle,
            "driverName" => &mut self.driver_name,
            "nodeName" => &mut self.node_name,
            "attachmentID" => &mut self.attachment_id,
            "volumeLifecycleMode" => &mut self.volume_lifecycle_mode,
            "seLinuxMountContext" => &mut self.selinux_mount_context,
            _ => {
                self.unknown.insert(key, value);
                return;
            }
        };
        *field = Some(value);
    }
}

/// The first JSON value in `bytes`, or where and why it is malformed.
fn first_value(bytes: &[u8]) -> Result<Value, VolDataError> {
    match serde_json::Deserializer::from_slice(bytes).into_iter::<Value>().next() {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(malformed(&e)),
        None => Err(VolDataError::Empty { len: bytes.len() }),
    }
}

/// serde_json's message ends with its own " at line L column C"; keep the reason alone.
fn malformed(e: &serde_json::Error) -> VolDataError {
    let (line, column) = (e.line(), e.column());
    let text = e.to_string();
    let reason = text.strip_suffix(&format!(" at line {line} column {column}")).unwrap_or(&text).to_owned();
    VolDataError::Malformed { line, column, reason }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape kubelet 1.26+ writes for a pod volume (keys sorted, trailing newline, as
    /// Go's encoder does); the values are made up.
    const POD_FILE: &str = concat!(
        r#"{"attachmentID":"csi-8e1f","driverName":"hostpath.csi.k8s.io","nodeName":"node-1","#,
        r#""specVolID":"pvc-42","volumeHandle":"c0ffee","volumeLifecycleMode":"Persistent"}"#,
        "\n"
    );

    fn some(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    #[test]
    fn pod_volume_file() {
        let data = parse(POD_FILE.as_bytes()).unwrap();
        assert_eq!(
            data,
            VolData {
                spec_vol_id: some("pvc-42"),
                volume_handle: some("c0ffee"),
                driver_name: some("hostpath.csi.k8s.io"),
                node_name: some("node-1"),
                attachment_id: some("csi-8e1f"),
                volume_lifecycle_mode: some("Persistent"),
                selinux_mount_context: None,
                unknown: BTreeMap::new(),
            }
        );
    }

    #[test]
    fn staging_file_with_selinux_and_unknown_keys() {
        let data = parse(
            br#"{"driverName":"d","volumeHandle":"h","seLinuxMountContext":"system_u:object_r:container_file_t:s0:c1,c2","futureKey":"x"}"#,
        )
        .unwrap();
        assert_eq!(data.driver_name, some("d"));
        assert_eq!(data.volume_handle, some("h"));
        assert_eq!(data.selinux_mount_context, some("system_u:object_r:container_file_t:s0:c1,c2"));
        assert_eq!(data.spec_vol_id, None);
        assert_eq!(data.unknown, BTreeMap::from([("futureKey".to_owned(), "x".to_owned())]));
    }

    #[test]
    fn empty_object_and_escapes() {
        assert_eq!(parse(b"{}"), Ok(VolData::default()));
        let data = parse(br#"{"specVolID":"a\u0000b\"c\u00e9"}"#).unwrap();
        assert_eq!(data.spec_vol_id, some("a\0b\"c\u{e9}"));
    }

    #[test]
    fn empty_and_whitespace_files() {
        assert_eq!(parse(b""), Err(VolDataError::Empty { len: 0 }));
        assert_eq!(parse(b" \n\t\r\n"), Err(VolDataError::Empty { len: 5 }));
        assert_eq!(
            parse(b"").unwrap_err().to_string(),
            "empty: 0 bytes and no JSON value (kubelet reports EOF for this file too)"
        );
    }

    #[test]
    fn malformed_json_names_line_and_column() {
        let err = parse(b"{\n  \"specVolID\": \"pvc-1\",\n  oops\n}").unwrap_err();
        assert_eq!(err, VolDataError::Malformed { line: 3, column: 3, reason: "key must be a string".to_owned() });
        assert_eq!(err.to_string(), "not valid JSON at line 3, column 3: key must be a string");
        // Truncated mid-write.
        assert!(matches!(parse(br#"{"specVolID":"pv"#), Err(VolDataError::Malformed { line: 1, .. })));
        // Not UTF-8 inside a string.
        assert!(matches!(parse(b"{\"specVolID\":\"\xff\"}"), Err(VolDataError::Malformed { .. })));
        // A form feed is not JSON whitespace: malformed, not empty.
        assert!(matches!(parse(b"\x0c"), Err(VolDataError::Malformed { .. })));
    }

    #[test]
    fn not_an_object() {
        for (text, found) in
            [("[]", "array"), ("\"s\"", "string"), ("42", "number"), ("null", "null"), ("true", "boolean")]
        {
            assert_eq!(parse(text.as_bytes()), Err(VolDataError::NotAnObject { found }), "{text}");
        }
    }

    #[test]
    fn non_string_values() {
        assert_eq!(
            parse(br#"{"specVolID":"a","nodeName":7}"#),
            Err(VolDataError::NonStringValue { key: "nodeName".to_owned(), found: "number" })
        );
        assert_eq!(
            parse(br#"{"x":{"y":"z"}}"#).unwrap_err().to_string(),
            r#"key "x" holds a JSON object, not a string"#
        );
        assert!(matches!(parse(br#"{"x":null}"#), Err(VolDataError::NonStringValue { found: "null", .. })));
    }

    #[test]
    fn trailing_data_and_duplicates_behave_like_kubelet() {
        let data = parse(b"{\"specVolID\":\"a\"}\n}garbage").unwrap();
        assert_eq!(data.spec_vol_id, some("a"));
        let data = parse(br#"{"specVolID":"a","specVolID":"b"}"#).unwrap();
        assert_eq!(data.spec_vol_id, some("b"));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = "[".repeat(100_000);
        assert!(matches!(parse(deep.as_bytes()), Err(VolDataError::Malformed { .. })));
    }

    #[test]
    fn serializes_back_to_kubelet_keys() {
        let data = parse(POD_FILE.as_bytes()).unwrap();
        let text = serde_json::to_string(&data).unwrap();
        let as_value = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert_eq!(as_value(&text), as_value(POD_FILE));
        let mut with_unknown = data.clone();
        with_unknown.unknown.insert("zKey".to_owned(), "v".to_owned());
        let round = parse(serde_json::to_string(&with_unknown).unwrap().as_bytes()).unwrap();
        assert_eq!(round, with_unknown);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = parse(&bytes);
        }
    }
}
