//! Durable per-bucket storage: log tablets and kv tablets (being written).
