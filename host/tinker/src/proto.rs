//! The protobuf messages of the Tinker API (package `tinker_public`,
//! proto3), written from the schema in the protocol reference (§7) with
//! prost's derives: no `.proto` file and no `protoc` at build time. Packed
//! arrays are `bytes` (raw little-endian, numpy's layout); `convert` turns
//! them into the JSON types and back.
//!
//! Only the messages metaclaw sends or reads are here: the
//! `forward_backward` request and the two results that come back as
//! protobuf (`ForwardBackwardOutput`, `SampleResponse`).

use std::collections::BTreeMap;

/// `forward_backward` (and, with `forward_only`, `forward`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ForwardBackwardRequest {
    #[prost(string, tag = "1")]
    pub model_id: String,
    #[prost(int32, tag = "2")]
    pub seq_id: i32,
    #[prost(message, repeated, tag = "3")]
    pub data: Vec<Datum>,
    #[prost(string, tag = "4")]
    pub loss_fn: String,
    /// Numeric loss settings (written here and in field 7, as the SDK does).
    #[prost(btree_map = "string, double", tag = "5")]
    pub loss_fn_config: BTreeMap<String, f64>,
    #[prost(bool, tag = "6")]
    pub forward_only: bool,
    #[prost(btree_map = "string, message", tag = "7")]
    pub loss_fn_config_v2: BTreeMap<String, LossConfigValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LossConfigValue {
    #[prost(oneof = "loss_config_value::Value", tags = "1, 2")]
    pub value: Option<loss_config_value::Value>,
}

pub mod loss_config_value {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(double, tag = "1")]
        Number(f64),
        #[prost(string, tag = "2")]
        Text(String),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Datum {
    #[prost(message, repeated, tag = "1")]
    pub model_input: Vec<Chunk>,
    #[prost(btree_map = "string, message", tag = "2")]
    pub loss_fn_inputs: BTreeMap<String, Tensor>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Chunk {
    #[prost(oneof = "chunk::Kind", tags = "1, 2, 3")]
    pub chunk: Option<chunk::Kind>,
}

pub mod chunk {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(message, tag = "1")]
        EncodedText(super::EncodedTextChunk),
        #[prost(message, tag = "2")]
        Image(super::ImageChunk),
        #[prost(message, tag = "3")]
        Dmel(super::DmelChunk),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EncodedTextChunk {
    /// int32 token ids, little-endian.
    #[prost(bytes = "vec", tag = "1")]
    pub tokens: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageChunk {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(int32, optional, tag = "3")]
    pub expected_tokens: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DmelChunk {
    #[prost(bytes = "vec", tag = "1")]
    pub dmel: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Tensor {
    #[prost(oneof = "tensor::Encoding", tags = "1, 2")]
    pub encoding: Option<tensor::Encoding>,
    #[prost(enumeration = "DType", tag = "3")]
    pub dtype: i32,
    #[prost(int64, repeated, tag = "4")]
    pub shape: Vec<i64>,
}

pub mod tensor {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Encoding {
        /// The values in the declared dtype, little-endian.
        #[prost(bytes, tag = "1")]
        Dense(Vec<u8>),
        #[prost(message, tag = "2")]
        SparseCsr(super::SparseCsr),
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SparseCsr {
    #[prost(bytes = "vec", tag = "1")]
    pub values: Vec<u8>,
    /// int64, little-endian.
    #[prost(bytes = "vec", tag = "2")]
    pub crow_indices: Vec<u8>,
    /// int64, little-endian.
    #[prost(bytes = "vec", tag = "3")]
    pub col_indices: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ForwardBackwardOutput {
    #[prost(string, tag = "1")]
    pub loss_fn_output_type: String,
    #[prost(message, repeated, tag = "2")]
    pub loss_fn_outputs: Vec<ArrayRecord>,
    #[prost(btree_map = "string, double", tag = "3")]
    pub metrics: BTreeMap<String, f64>,
}

/// One output field for every datum of a record, packed.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ArrayRecord {
    #[prost(string, tag = "1")]
    pub type_tag: String,
    #[prost(btree_map = "string, message", tag = "2")]
    pub fields: BTreeMap<String, BatchedTensor>,
    #[prost(int64, tag = "3")]
    pub num_datums: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BatchedTensor {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
    /// `num_datums + 1` int64 byte offsets into `data`, little-endian.
    #[prost(bytes = "vec", tag = "2")]
    pub offsets: Vec<u8>,
    #[prost(enumeration = "DType", tag = "3")]
    pub dtype: i32,
    #[prost(int64, repeated, tag = "4")]
    pub trailing_shape: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SampleResponse {
    #[prost(message, repeated, tag = "1")]
    pub sequences: Vec<SampledSequence>,
    /// f32 per prompt token, little-endian; NaN means none (the first).
    #[prost(bytes = "vec", optional, tag = "2")]
    pub prompt_logprobs: Option<Vec<u8>>,
    #[prost(message, optional, tag = "3")]
    pub topk_prompt_logprobs: Option<TopkLogprobs>,
    #[prost(int32, tag = "4")]
    pub prompt_cache_hit_tokens: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SampledSequence {
    #[prost(enumeration = "StopReason", tag = "1")]
    pub stop_reason: i32,
    /// int32 token ids, little-endian: exactly what was sampled.
    #[prost(bytes = "vec", tag = "2")]
    pub tokens: Vec<u8>,
    /// f32 per sampled token, little-endian.
    #[prost(bytes = "vec", optional, tag = "3")]
    pub logprobs: Option<Vec<u8>>,
    #[prost(message, optional, tag = "4")]
    pub topk_sampled_logprobs: Option<TopkLogprobs>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TopkLogprobs {
    /// int32, row-major N × K.
    #[prost(bytes = "vec", tag = "1")]
    pub token_ids: Vec<u8>,
    /// f32, row-major N × K.
    #[prost(bytes = "vec", tag = "2")]
    pub logprobs: Vec<u8>,
    #[prost(uint32, tag = "3")]
    pub k: u32,
    #[prost(uint32, tag = "4")]
    pub length: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum DType {
    Unspecified = 0,
    Float32 = 1,
    Int64 = 2,
    Int32 = 3,
    Bfloat16 = 4,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum StopReason {
    Stop = 0,
    Length = 1,
}
