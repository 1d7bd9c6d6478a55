//! What agent frameworks put into their requests besides the conversation.

pub mod openclaw;
