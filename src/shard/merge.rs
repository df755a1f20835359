//! Merging result sets from several shards into one. (Being written.)
