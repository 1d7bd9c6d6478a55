//! Between the JSON types and the protobuf messages: the `forward_backward`
//! request out, and the protobuf results in (reference §7.2: packed
//! little-endian arrays, per-datum outputs batched with byte offsets,
//! bfloat16 and int32 widened, NaN for a missing logprob), and the zstd
//! a `forward_backward` body is sent in when the server asks for it.

use std::collections::BTreeMap;

use prost::Message;

use crate::proto;
use crate::types::{
    Chunk, Datum, ForwardBackwardResult, LossConfig, LossFn, Sampled, Sequence, StopReason,
    TensorData,
};

/// A protobuf body that does not hold what the schema says.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("the server's protobuf answer cannot be decoded: {0}")]
    Decode(String),
    #[error("the server's protobuf answer is malformed: {0}")]
    Malformed(String),
}

/// The `forward_backward` request body (protobuf). Numeric loss settings go
/// into both config fields, as the SDK writes them; text ones only into
/// the second.
pub fn forward_backward_body(
    model_id: &str,
    seq_id: i32,
    data: &[Datum],
    loss: LossFn,
    config: &BTreeMap<String, LossConfig>,
    forward_only: bool,
) -> Vec<u8> {
    let mut request = proto::ForwardBackwardRequest {
        model_id: model_id.to_string(),
        seq_id,
        data: data.iter().map(datum).collect(),
        loss_fn: loss.as_str().to_string(),
        forward_only,
        ..Default::default()
    };
    for (name, value) in config {
        let value = match value {
            LossConfig::Number(n) => {
                request.loss_fn_config.insert(name.clone(), *n);
                proto::loss_config_value::Value::Number(*n)
            }
            LossConfig::Text(t) => proto::loss_config_value::Value::Text(t.clone()),
        };
        request
            .loss_fn_config_v2
            .insert(name.clone(), proto::LossConfigValue { value: Some(value) });
    }
    request.encode_to_vec()
}

fn datum(datum: &Datum) -> proto::Datum {
    proto::Datum {
        model_input: datum
            .model_input
            .chunks
            .iter()
            .map(|chunk| match chunk {
                Chunk::EncodedText { tokens } => proto::Chunk {
                    chunk: Some(proto::chunk::Kind::EncodedText(proto::EncodedTextChunk {
                        tokens: tokens.iter().flat_map(|t| t.to_le_bytes()).collect(),
                    })),
                },
            })
            .collect(),
        loss_fn_inputs: datum
            .loss_fn_inputs
            .iter()
            .map(|(name, tensor)| (name.clone(), self::tensor(tensor)))
            .collect(),
    }
}

fn tensor(tensor: &TensorData) -> proto::Tensor {
    let (bytes, dtype, shape): (Vec<u8>, proto::DType, _) = match tensor {
        TensorData::Int64 { data, shape } => (
            data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            proto::DType::Int64,
            shape,
        ),
        TensorData::Float32 { data, shape } => (
            data.iter().flat_map(|v| v.to_le_bytes()).collect(),
            proto::DType::Float32,
            shape,
        ),
    };
    proto::Tensor {
        encoding: Some(proto::tensor::Encoding::Dense(bytes)),
        dtype: dtype as i32,
        shape: shape.clone().unwrap_or_else(|| vec![tensor.len() as i64]),
    }
}

/// A protobuf `ForwardBackwardOutput`, one output map per datum.
pub fn forward_backward_result(body: &[u8]) -> Result<ForwardBackwardResult, Error> {
    let output =
        proto::ForwardBackwardOutput::decode(body).map_err(|e| Error::Decode(e.to_string()))?;
    let mut outputs = Vec::new();
    for record in &output.loss_fn_outputs {
        let datums = usize::try_from(record.num_datums)
            .map_err(|_| Error::Malformed(format!("num_datums {}", record.num_datums)))?;
        let first = outputs.len();
        outputs.resize_with(first + datums, BTreeMap::new);
        for (name, batched) in &record.fields {
            for (i, values) in unbatch(name, batched, datums)?.into_iter().enumerate() {
                if let Some(map) = outputs.get_mut(first + i) {
                    map.insert(name.clone(), values);
                }
            }
        }
    }
    let output_type = output
        .loss_fn_output_type
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    Ok(ForwardBackwardResult {
        loss_fn_output_type: output_type,
        loss_fn_outputs: outputs,
        metrics: output.metrics,
    })
}

/// One field of every datum of a record: datum *i*'s bytes are
/// `data[offsets[i]..offsets[i + 1]]`.
fn unbatch(
    name: &str,
    batched: &proto::BatchedTensor,
    datums: usize,
) -> Result<Vec<TensorData>, Error> {
    let offsets: Vec<i64> = le_values(&batched.offsets, i64::from_le_bytes)
        .ok_or_else(|| Error::Malformed(format!("{name}: offsets are not int64")))?;
    if offsets.len() != datums + 1 {
        return Err(Error::Malformed(format!(
            "{name}: {} offsets for {datums} datums",
            offsets.len()
        )));
    }
    let dtype = proto::DType::try_from(batched.dtype)
        .map_err(|_| Error::Malformed(format!("{name}: unknown dtype {}", batched.dtype)))?;
    let mut out = Vec::with_capacity(datums);
    for pair in offsets.windows(2) {
        let (start, end) = (pair[0], pair[1]);
        let bytes = usize::try_from(start)
            .ok()
            .zip(usize::try_from(end).ok())
            .and_then(|(s, e)| batched.data.get(s..e))
            .ok_or_else(|| {
                Error::Malformed(format!("{name}: offsets {start}..{end} out of range"))
            })?;
        let bad = || Error::Malformed(format!("{name}: {} bytes of {dtype:?}", bytes.len()));
        out.push(match dtype {
            proto::DType::Float32 => {
                TensorData::float32(le_values(bytes, f32::from_le_bytes).ok_or_else(bad)?)
            }
            proto::DType::Bfloat16 => TensorData::float32(
                le_values(bytes, u16::from_le_bytes)
                    .ok_or_else(bad)?
                    .into_iter()
                    .map(|h| f32::from_bits(u32::from(h) << 16))
                    .collect(),
            ),
            proto::DType::Int64 => {
                TensorData::int64(le_values(bytes, i64::from_le_bytes).ok_or_else(bad)?)
            }
            proto::DType::Int32 => TensorData::int64(
                le_values(bytes, i32::from_le_bytes)
                    .ok_or_else(bad)?
                    .into_iter()
                    .map(i64::from)
                    .collect(),
            ),
            proto::DType::Unspecified => return Err(bad()),
        });
    }
    Ok(out)
}

/// A protobuf `SampleResponse`.
pub fn sampled(body: &[u8]) -> Result<Sampled, Error> {
    let response = proto::SampleResponse::decode(body).map_err(|e| Error::Decode(e.to_string()))?;
    let mut sequences = Vec::with_capacity(response.sequences.len());
    for (i, s) in response.sequences.iter().enumerate() {
        let tokens = le_values(&s.tokens, i32::from_le_bytes)
            .ok_or_else(|| Error::Malformed(format!("sequence {i}: tokens are not int32")))?;
        let logprobs =
            match &s.logprobs {
                Some(bytes) => Some(le_values(bytes, f32::from_le_bytes).ok_or_else(|| {
                    Error::Malformed(format!("sequence {i}: logprobs are not f32"))
                })?),
                None => None,
            };
        sequences.push(Sequence {
            stop_reason: match proto::StopReason::try_from(s.stop_reason) {
                Ok(proto::StopReason::Length) => StopReason::Length,
                _ => StopReason::Stop,
            },
            tokens,
            logprobs,
        });
    }
    let prompt_logprobs = match &response.prompt_logprobs {
        Some(bytes) => Some(
            le_values(bytes, f32::from_le_bytes)
                .ok_or_else(|| Error::Malformed("prompt logprobs are not f32".into()))?
                .into_iter()
                .map(|v| (!v.is_nan()).then_some(v))
                .collect(),
        ),
        None => None,
    };
    Ok(Sampled {
        sequences,
        prompt_logprobs,
    })
}

/// A `forward_backward` request as a server reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardBackwardRequest {
    pub model_id: String,
    pub seq_id: i64,
    pub data: Vec<Datum>,
    pub loss: LossFn,
    pub forward_only: bool,
}

/// Reads a protobuf `forward_backward` body (the server's side of
/// [`forward_backward_body`]).
pub fn decode_forward_backward(body: &[u8]) -> Result<ForwardBackwardRequest, Error> {
    let request =
        proto::ForwardBackwardRequest::decode(body).map_err(|e| Error::Decode(e.to_string()))?;
    let loss: LossFn =
        serde_json::from_value(serde_json::Value::String(request.loss_fn.clone()))
            .map_err(|_| Error::Malformed(format!("unknown loss_fn {:?}", request.loss_fn)))?;
    let mut data = Vec::with_capacity(request.data.len());
    for (i, d) in request.data.iter().enumerate() {
        let mut chunks = Vec::new();
        for chunk in &d.model_input {
            match &chunk.chunk {
                Some(proto::chunk::Kind::EncodedText(text)) => chunks.push(Chunk::EncodedText {
                    tokens: le_values(&text.tokens, i32::from_le_bytes).ok_or_else(|| {
                        Error::Malformed(format!("datum {i}: tokens are not int32"))
                    })?,
                }),
                _ => return Err(Error::Malformed(format!("datum {i}: only token chunks"))),
            }
        }
        let mut inputs = BTreeMap::new();
        for (name, t) in &d.loss_fn_inputs {
            let Some(proto::tensor::Encoding::Dense(bytes)) = &t.encoding else {
                return Err(Error::Malformed(format!("datum {i}: {name} is not dense")));
            };
            let bad = || Error::Malformed(format!("datum {i}: {name} does not match its dtype"));
            let values = match proto::DType::try_from(t.dtype) {
                Ok(proto::DType::Int64) => {
                    TensorData::int64(le_values(bytes, i64::from_le_bytes).ok_or_else(bad)?)
                }
                Ok(proto::DType::Float32) => {
                    TensorData::float32(le_values(bytes, f32::from_le_bytes).ok_or_else(bad)?)
                }
                _ => return Err(bad()),
            };
            inputs.insert(name.clone(), values);
        }
        data.push(Datum {
            model_input: crate::types::ModelInput { chunks },
            loss_fn_inputs: inputs,
        });
    }
    Ok(ForwardBackwardRequest {
        model_id: request.model_id,
        seq_id: i64::from(request.seq_id),
        data,
        loss,
        forward_only: request.forward_only,
    })
}

/// A forward/backward result as protobuf (the server's side of
/// [`forward_backward_result`]): one record holding every datum.
pub fn encode_forward_backward_result(result: &ForwardBackwardResult) -> Vec<u8> {
    let mut fields: BTreeMap<String, proto::BatchedTensor> = BTreeMap::new();
    let names: std::collections::BTreeSet<&String> = result
        .loss_fn_outputs
        .iter()
        .flat_map(|m| m.keys())
        .collect();
    for name in names {
        let mut batched = proto::BatchedTensor {
            dtype: proto::DType::Float32 as i32,
            ..Default::default()
        };
        let mut offsets = vec![0i64];
        for map in &result.loss_fn_outputs {
            match map.get(name) {
                Some(TensorData::Int64 { data, .. }) => {
                    batched.dtype = proto::DType::Int64 as i32;
                    batched
                        .data
                        .extend(data.iter().flat_map(|v| v.to_le_bytes()));
                }
                Some(TensorData::Float32 { data, .. }) => {
                    batched
                        .data
                        .extend(data.iter().flat_map(|v| v.to_le_bytes()));
                }
                None => {}
            }
            offsets.push(batched.data.len() as i64);
        }
        batched.offsets = offsets.iter().flat_map(|v| v.to_le_bytes()).collect();
        fields.insert(name.clone(), batched);
    }
    proto::ForwardBackwardOutput {
        loss_fn_output_type: result.loss_fn_output_type.clone(),
        loss_fn_outputs: vec![proto::ArrayRecord {
            type_tag: String::new(),
            fields,
            num_datums: result.loss_fn_outputs.len() as i64,
        }],
        metrics: result.metrics.clone(),
    }
    .encode_to_vec()
}

/// Sampled sequences as protobuf (the server's side of [`sampled`]).
pub fn encode_sampled(sampled: &Sampled) -> Vec<u8> {
    proto::SampleResponse {
        sequences: sampled
            .sequences
            .iter()
            .map(|s| proto::SampledSequence {
                stop_reason: match s.stop_reason {
                    StopReason::Stop => proto::StopReason::Stop as i32,
                    StopReason::Length => proto::StopReason::Length as i32,
                },
                tokens: s.tokens.iter().flat_map(|t| t.to_le_bytes()).collect(),
                logprobs: s
                    .logprobs
                    .as_ref()
                    .map(|l| l.iter().flat_map(|v| v.to_le_bytes()).collect()),
                topk_sampled_logprobs: None,
            })
            .collect(),
        prompt_logprobs: sampled.prompt_logprobs.as_ref().map(|l| {
            l.iter()
                .flat_map(|v| v.unwrap_or(f32::NAN).to_le_bytes())
                .collect()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// A body zstd-compressed for `Content-Encoding: zstd` (the server's
/// `proto_compress_fwdbwd`). One-shot, so the frame states its content
/// size: Python servers' `zstandard` decompressors need it.
pub fn compress_body(body: &[u8]) -> std::io::Result<Vec<u8>> {
    zstd::bulk::compress(body, zstd::DEFAULT_COMPRESSION_LEVEL)
}

/// A `Content-Encoding: zstd` body, decompressed (the server's side of
/// [`compress_body`]); more than `limit` bytes is an error, not an
/// allocation.
pub fn decompress_body(body: &[u8], limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(body)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)?;
    if out.len() as u64 > limit {
        return Err(std::io::Error::other(format!(
            "the body decompresses to more than {limit} bytes"
        )));
    }
    Ok(out)
}

/// Little-endian values of `N` bytes each; `None` if the length is not a
/// multiple of `N`.
fn le_values<T, const N: usize>(bytes: &[u8], from: fn([u8; N]) -> T) -> Option<Vec<T>> {
    if !bytes.len().is_multiple_of(N) {
        return None;
    }
    bytes
        .chunks_exact(N)
        .map(|c| <[u8; N]>::try_from(c).ok().map(from))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::types::ModelInput;

    /// The bytes worked out by hand from the schema (reference §7): field
    /// tags, lengths and little-endian packed arrays.
    #[test]
    fn the_forward_backward_body_matches_the_schema_byte_for_byte() {
        let datum = Datum {
            model_input: ModelInput::tokens(vec![5]),
            loss_fn_inputs: BTreeMap::from([(
                "target_tokens".to_string(),
                TensorData::int64(vec![6]),
            )]),
        };
        let config = BTreeMap::from([("clip_low_threshold".to_string(), LossConfig::Number(0.5))]);
        let body = forward_backward_body("m", 1, &[datum], LossFn::Ppo, &config, false);
        let half = [0, 0, 0, 0, 0, 0, 0xe0, 0x3f]; // 0.5, f64 little-endian
        let expected: Vec<u8> = [
            &[0x0a, 0x01, b'm'][..], // 1: model_id
            &[0x10, 0x01],           // 2: seq_id
            // 3: one Datum (44 bytes): 1: a Chunk holding 1: an encoded
            // text chunk whose 1: tokens are int32 [5]; 2: the map entry
            // "target_tokens" → Tensor {1: dense int64 [6], 3: INT64, 4: [1]}
            &[0x1a, 0x2c, 0x0a, 0x08, 0x0a, 0x06, 0x0a, 0x04, 5, 0, 0, 0],
            &[0x12, 0x20, 0x0a, 0x0d],
            b"target_tokens",
            &[
                0x12, 0x0f, 0x0a, 0x08, 6, 0, 0, 0, 0, 0, 0, 0, 0x18, 0x02, 0x22, 0x01, 0x01,
            ],
            &[0x22, 0x03], // 4: loss_fn
            b"ppo",
            &[0x2a, 0x1d, 0x0a, 0x12], // 5: loss_fn_config entry, a double
            b"clip_low_threshold",
            &[0x11],
            &half,
            &[0x3a, 0x1f, 0x0a, 0x12], // 7: loss_fn_config_v2 entry, {1: number}
            b"clip_low_threshold",
            &[0x12, 0x09, 0x09],
            &half,
        ]
        .concat();
        assert_eq!(body, expected);
    }

    #[test]
    fn both_sides_of_the_protobuf_dialect_round_trip() {
        let datum = Datum {
            model_input: ModelInput::tokens(vec![1, 2, 3]),
            loss_fn_inputs: BTreeMap::from([
                (
                    "target_tokens".to_string(),
                    TensorData::int64(vec![2, 3, 4]),
                ),
                (
                    "advantages".to_string(),
                    TensorData::float32(vec![0.5, -1.0, 2.0]),
                ),
            ]),
        };
        let body = forward_backward_body(
            "m",
            7,
            std::slice::from_ref(&datum),
            LossFn::ImportanceSampling,
            &BTreeMap::new(),
            false,
        );
        let read = decode_forward_backward(&body).unwrap();
        assert_eq!(
            (read.model_id.as_str(), read.seq_id, read.loss),
            ("m", 7, LossFn::ImportanceSampling)
        );
        assert_eq!(read.data, [datum]);

        let result = ForwardBackwardResult {
            loss_fn_output_type: "scalar".into(),
            loss_fn_outputs: vec![
                BTreeMap::from([(
                    "logprobs".to_string(),
                    TensorData::float32(vec![-1.0, -2.0]),
                )]),
                BTreeMap::from([("logprobs".to_string(), TensorData::float32(vec![-3.0]))]),
            ],
            metrics: BTreeMap::from([("loss:sum".to_string(), 1.5)]),
        };
        assert_eq!(
            forward_backward_result(&encode_forward_backward_result(&result)).unwrap(),
            result
        );

        let samples = Sampled {
            sequences: vec![Sequence {
                stop_reason: StopReason::Stop,
                tokens: vec![9, 10],
                logprobs: Some(vec![-0.1, -0.2]),
            }],
            prompt_logprobs: Some(vec![None, Some(-4.0)]),
        };
        assert_eq!(sampled(&encode_sampled(&samples)).unwrap(), samples);
    }

    #[test]
    fn text_loss_settings_go_only_into_the_second_config_field() {
        let config = BTreeMap::from([("mode".to_string(), LossConfig::Text("x".into()))]);
        let body = forward_backward_body("m", 2, &[], LossFn::Cispo, &config, true);
        let request = proto::ForwardBackwardRequest::decode(&body[..]).unwrap();
        assert!(request.loss_fn_config.is_empty());
        assert_eq!(
            request.loss_fn_config_v2["mode"].value,
            Some(proto::loss_config_value::Value::Text("x".into()))
        );
        assert!(request.forward_only);
        assert_eq!(request.seq_id, 2);
    }

    #[test]
    fn compressed_bodies_come_back_whole_and_state_their_size() {
        let body = forward_backward_body("m", 1, &[], LossFn::Ppo, &BTreeMap::new(), false);
        let packed = compress_body(&body).unwrap();
        // The frame header says how large the content is (Python's
        // `ZstdDecompressor().decompress` refuses a frame that does not).
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&packed).ok(),
            Some(Some(body.len() as u64))
        );
        assert_eq!(decompress_body(&packed, 1 << 20).unwrap(), body);
        let big = compress_body(&[0u8; 4096]).unwrap();
        assert!(decompress_body(&big, 4095).is_err());
        assert!(decompress_body(b"not zstd", 1 << 20).is_err());
    }

    #[test]
    fn batched_outputs_come_apart_per_datum() {
        let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let i64s = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let output = proto::ForwardBackwardOutput {
            loss_fn_output_type: "tinker.types:ScalarOutput".into(),
            loss_fn_outputs: vec![proto::ArrayRecord {
                type_tag: String::new(),
                fields: BTreeMap::from([
                    (
                        "logprobs".to_string(),
                        proto::BatchedTensor {
                            data: f32s(&[-1.0, -2.0, -3.0]),
                            offsets: i64s(&[0, 4, 12]),
                            dtype: proto::DType::Float32 as i32,
                            trailing_shape: vec![],
                        },
                    ),
                    (
                        // bfloat16 -1.0 and 2.0, then an int32 field.
                        "loss".to_string(),
                        proto::BatchedTensor {
                            data: vec![0x80, 0xbf, 0x00, 0x40],
                            offsets: i64s(&[0, 2, 4]),
                            dtype: proto::DType::Bfloat16 as i32,
                            trailing_shape: vec![],
                        },
                    ),
                    (
                        "ids".to_string(),
                        proto::BatchedTensor {
                            data: [7i32, 8].iter().flat_map(|x| x.to_le_bytes()).collect(),
                            offsets: i64s(&[0, 4, 8]),
                            dtype: proto::DType::Int32 as i32,
                            trailing_shape: vec![],
                        },
                    ),
                ]),
                num_datums: 2,
            }],
            metrics: BTreeMap::from([("loss:sum".to_string(), 6.0)]),
        };
        let result = forward_backward_result(&output.encode_to_vec()).unwrap();
        assert_eq!(result.loss_fn_output_type, "ScalarOutput");
        assert_eq!(result.loss_fn_outputs.len(), 2);
        assert_eq!(
            result.loss_fn_outputs[0]["logprobs"],
            TensorData::float32(vec![-1.0])
        );
        assert_eq!(
            result.loss_fn_outputs[1]["logprobs"],
            TensorData::float32(vec![-2.0, -3.0])
        );
        assert_eq!(
            result.loss_fn_outputs[0]["loss"],
            TensorData::float32(vec![-1.0])
        );
        assert_eq!(
            result.loss_fn_outputs[1]["loss"],
            TensorData::float32(vec![2.0])
        );
        assert_eq!(result.loss_fn_outputs[1]["ids"], TensorData::int64(vec![8]));
        assert_eq!(result.metrics["loss:sum"], 6.0);
    }

    #[test]
    fn malformed_results_are_errors_not_panics() {
        let bad_offsets = proto::ForwardBackwardOutput {
            loss_fn_outputs: vec![proto::ArrayRecord {
                fields: BTreeMap::from([(
                    "logprobs".to_string(),
                    proto::BatchedTensor {
                        data: vec![0; 4],
                        offsets: [0i64, 64].iter().flat_map(|x| x.to_le_bytes()).collect(),
                        dtype: proto::DType::Float32 as i32,
                        trailing_shape: vec![],
                    },
                )]),
                num_datums: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        let e = forward_backward_result(&bad_offsets.encode_to_vec()).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
        assert!(matches!(
            forward_backward_result(b"\xff\xff"),
            Err(Error::Decode(_))
        ));
        let odd = proto::SampleResponse {
            sequences: vec![proto::SampledSequence {
                tokens: vec![1, 2, 3],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(sampled(&odd.encode_to_vec()).is_err());
    }

    #[test]
    fn samples_keep_the_exact_tokens_and_their_logprobs() {
        let response = proto::SampleResponse {
            sequences: vec![proto::SampledSequence {
                stop_reason: proto::StopReason::Length as i32,
                tokens: [7i32, 8].iter().flat_map(|x| x.to_le_bytes()).collect(),
                logprobs: Some(
                    [-0.5f32, -0.25]
                        .iter()
                        .flat_map(|x| x.to_le_bytes())
                        .collect(),
                ),
                topk_sampled_logprobs: None,
            }],
            prompt_logprobs: Some(
                [f32::NAN, -1.0]
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect(),
            ),
            ..Default::default()
        };
        let sampled = sampled(&response.encode_to_vec()).unwrap();
        assert_eq!(sampled.sequences[0].tokens, [7, 8]);
        assert_eq!(sampled.sequences[0].logprobs, Some(vec![-0.5, -0.25]));
        assert_eq!(sampled.sequences[0].stop_reason, StopReason::Length);
        assert_eq!(sampled.prompt_logprobs, Some(vec![None, Some(-1.0)]));
    }
}
