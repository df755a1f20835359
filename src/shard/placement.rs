//! Placement: which shard a shard key value maps to. (Being written.)
