//! The connection-phase handshake: as a server towards clients, and as a
//! client towards shards. Only `mysql_native_password` is spoken.

use super::consts::cap;
use super::wire::{put_lenenc_bytes, put_null_str, Cursor};
use super::Malformed;

/// The authentication plugin idgate uses on both sides.
pub const NATIVE_PASSWORD: &[u8] = b"mysql_native_password";

/// Fields of the server's initial handshake (protocol version 10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerHandshake {
    pub server_version: Vec<u8>,
    pub connection_id: u32,
    /// 20-byte nonce for the password scramble.
    pub scramble: Vec<u8>,
    pub capabilities: u32,
    /// MariaDB's extended capabilities (only when `capabilities` lacks
    /// `LONG_PASSWORD`, which MariaDB calls `CLIENT_MYSQL`).
    pub ext_capabilities: u32,
    pub charset: u8,
    pub status: u16,
    pub auth_plugin: Vec<u8>,
}

impl ServerHandshake {
    /// Encodes the handshake packet idgate sends to a client.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(96 + self.server_version.len());
        out.push(10);
        put_null_str(&mut out, &self.server_version);
        out.extend_from_slice(&self.connection_id.to_le_bytes());
        let (a, b) = self.scramble.split_at(self.scramble.len().min(8));
        out.extend_from_slice(a);
        out.push(0);
        out.extend_from_slice(&(self.capabilities as u16).to_le_bytes());
        out.push(self.charset);
        out.extend_from_slice(&self.status.to_le_bytes());
        out.extend_from_slice(&((self.capabilities >> 16) as u16).to_le_bytes());
        out.push((self.scramble.len() + 1) as u8);
        out.extend_from_slice(&[0u8; 6]);
        let ext = if self.capabilities & cap::LONG_PASSWORD == 0 {
            self.ext_capabilities
        } else {
            0
        };
        out.extend_from_slice(&ext.to_le_bytes());
        out.extend_from_slice(b);
        out.push(0);
        put_null_str(&mut out, &self.auth_plugin);
        out
    }

    /// Parses a shard's initial handshake.
    pub fn decode(payload: &[u8]) -> Result<ServerHandshake, Malformed> {
        let mut c = Cursor::new(payload);
        if c.u8()? != 10 {
            return Err(Malformed("unsupported handshake protocol version"));
        }
        let server_version = c.null_str().to_vec();
        let connection_id = c.u32()?;
        let mut scramble = c.take(8)?.to_vec();
        c.u8()?;
        let mut capabilities = c.u16()? as u32;
        let mut ext_capabilities = 0;
        let mut charset = 0;
        let mut status = 0;
        let mut auth_plugin = Vec::new();
        if !c.is_empty() {
            charset = c.u8()?;
            status = c.u16()?;
            capabilities |= (c.u16()? as u32) << 16;
            let auth_len = c.u8()? as usize;
            c.take(6)?;
            let ext = c.u32()?;
            if capabilities & cap::LONG_PASSWORD == 0 {
                ext_capabilities = ext;
            }
            if capabilities & cap::SECURE_CONNECTION != 0 {
                let n = auth_len.saturating_sub(8).max(13);
                let part = c.take(n.min(c.remaining()))?;
                // The second part is NUL-terminated; the nonce is 20 bytes in all.
                let part = part.strip_suffix(&[0]).unwrap_or(part);
                scramble.extend_from_slice(part);
            }
            if capabilities & cap::PLUGIN_AUTH != 0 {
                auth_plugin = c.null_str().to_vec();
            }
        }
        Ok(ServerHandshake {
            server_version,
            connection_id,
            scramble,
            capabilities,
            ext_capabilities,
            charset,
            status,
            auth_plugin,
        })
    }
}

/// Fields of a client's handshake response (HandshakeResponse41).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientHandshake {
    pub capabilities: u32,
    /// MariaDB's extended capabilities (sent when the client is not in
    /// `CLIENT_MYSQL` mode).
    pub ext_capabilities: u32,
    pub max_packet: u32,
    pub charset: u8,
    pub user: Vec<u8>,
    pub auth_response: Vec<u8>,
    pub database: Option<Vec<u8>>,
    pub auth_plugin: Option<Vec<u8>>,
    /// Raw connection attributes (kept, not interpreted).
    pub attrs: Option<Vec<u8>>,
}

/// Length of an SSLRequest packet: a client asking to switch to TLS.
pub const SSL_REQUEST_LEN: usize = 32;

impl ClientHandshake {
    /// Parses a client's handshake response.
    pub fn decode(payload: &[u8]) -> Result<ClientHandshake, Malformed> {
        let mut c = Cursor::new(payload);
        let capabilities = c.u32()?;
        if capabilities & cap::PROTOCOL_41 == 0 {
            return Err(Malformed("client does not speak protocol 4.1"));
        }
        let max_packet = c.u32()?;
        let charset = c.u8()?;
        c.take(19)?;
        let ext = c.u32()?;
        let ext_capabilities = if capabilities & cap::LONG_PASSWORD == 0 {
            ext
        } else {
            0
        };
        let user = c.null_str().to_vec();
        let auth_response = if capabilities & cap::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            c.lenenc_bytes()?.to_vec()
        } else if capabilities & cap::SECURE_CONNECTION != 0 {
            let n = c.u8()? as usize;
            c.take(n)?.to_vec()
        } else {
            c.null_str().to_vec()
        };
        let database = if capabilities & cap::CONNECT_WITH_DB != 0 && !c.is_empty() {
            Some(c.null_str().to_vec()).filter(|d| !d.is_empty())
        } else {
            None
        };
        let auth_plugin = if capabilities & cap::PLUGIN_AUTH != 0 && !c.is_empty() {
            Some(c.null_str().to_vec())
        } else {
            None
        };
        let attrs = if capabilities & cap::CONNECT_ATTRS != 0 && !c.is_empty() {
            Some(c.lenenc_bytes()?.to_vec())
        } else {
            None
        };
        Ok(ClientHandshake {
            capabilities,
            ext_capabilities,
            max_packet,
            charset,
            user,
            auth_response,
            database,
            auth_plugin,
            attrs,
        })
    }

    /// Encodes the handshake response idgate sends to a shard.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.user.len() + self.auth_response.len());
        out.extend_from_slice(&self.capabilities.to_le_bytes());
        out.extend_from_slice(&self.max_packet.to_le_bytes());
        out.push(self.charset);
        out.extend_from_slice(&[0u8; 19]);
        let ext = if self.capabilities & cap::LONG_PASSWORD == 0 {
            self.ext_capabilities
        } else {
            0
        };
        out.extend_from_slice(&ext.to_le_bytes());
        put_null_str(&mut out, &self.user);
        if self.capabilities & cap::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            put_lenenc_bytes(&mut out, &self.auth_response);
        } else {
            out.push(self.auth_response.len().min(255) as u8);
            out.extend_from_slice(&self.auth_response[..self.auth_response.len().min(255)]);
        }
        if self.capabilities & cap::CONNECT_WITH_DB != 0 {
            put_null_str(&mut out, self.database.as_deref().unwrap_or_default());
        }
        if self.capabilities & cap::PLUGIN_AUTH != 0 {
            put_null_str(
                &mut out,
                self.auth_plugin.as_deref().unwrap_or(NATIVE_PASSWORD),
            );
        }
        if self.capabilities & cap::CONNECT_ATTRS != 0 {
            put_lenenc_bytes(&mut out, self.attrs.as_deref().unwrap_or_default());
        }
        out
    }
}

/// The `mysql_native_password` token for `password` and `nonce` (empty for an empty password).
pub fn native_token(nonce: &[u8], password: &[u8]) -> Vec<u8> {
    mysql_common::scramble::scramble_native(nonce, password)
        .map(|t| t.to_vec())
        .unwrap_or_default()
}

/// Checks a client's `mysql_native_password` token in constant time.
pub fn verify_native(nonce: &[u8], password: &[u8], token: &[u8]) -> bool {
    let expected = native_token(nonce, password);
    if expected.len() != token.len() {
        return false;
    }
    expected
        .iter()
        .zip(token)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// An auth-switch request (`0xfe`, plugin name, nonce).
pub fn auth_switch_request(plugin: &[u8], nonce: &[u8]) -> Vec<u8> {
    let mut out = vec![0xfe];
    put_null_str(&mut out, plugin);
    put_null_str(&mut out, nonce);
    out
}

/// Parses an auth-switch request from a shard: the plugin and its nonce.
pub fn parse_auth_switch(payload: &[u8]) -> Result<(Vec<u8>, Vec<u8>), Malformed> {
    let mut c = Cursor::new(payload);
    if c.u8()? != 0xfe {
        return Err(Malformed("not an auth switch request"));
    }
    let plugin = c.null_str().to_vec();
    let data = c.rest();
    let data = data.strip_suffix(&[0]).unwrap_or(data).to_vec();
    Ok((plugin, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_handshake_round_trips() {
        let h = ServerHandshake {
            server_version: b"5.5.5-10.11.19-MariaDB".to_vec(),
            connection_id: 77,
            scramble: (1..=20).collect(),
            capabilities: cap::SUPPORTED & !cap::LONG_PASSWORD,
            ext_capabilities: cap::EXT_EXTENDED_METADATA,
            charset: 45,
            status: 2,
            auth_plugin: NATIVE_PASSWORD.to_vec(),
        };
        assert_eq!(ServerHandshake::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn client_handshake_round_trips_in_both_auth_encodings() {
        for extra in [0, cap::PLUGIN_AUTH_LENENC_CLIENT_DATA] {
            let h = ClientHandshake {
                capabilities: cap::PROTOCOL_41
                    | cap::SECURE_CONNECTION
                    | cap::PLUGIN_AUTH
                    | cap::CONNECT_WITH_DB
                    | cap::CONNECT_ATTRS
                    | extra,
                ext_capabilities: 0,
                max_packet: 1 << 24,
                charset: 45,
                user: b"app".to_vec(),
                auth_response: native_token(&[7; 20], b"secret"),
                database: Some(b"shop".to_vec()),
                auth_plugin: Some(NATIVE_PASSWORD.to_vec()),
                attrs: Some(b"\x03abc\x01d".to_vec()),
            };
            assert_eq!(ClientHandshake::decode(&h.encode()), Ok(h));
        }
    }

    #[test]
    fn native_password_verification() {
        let nonce = [9u8; 20];
        let token = native_token(&nonce, b"pw");
        assert!(verify_native(&nonce, b"pw", &token));
        assert!(!verify_native(&nonce, b"other", &token));
        assert!(verify_native(&nonce, b"", &[]));
        assert!(!verify_native(&nonce, b"pw", &[]));
    }

    #[test]
    fn truncated_handshakes_are_errors() {
        assert!(ClientHandshake::decode(&[0xff, 0xff]).is_err());
        assert!(ServerHandshake::decode(&[10, b'x', 0, 1]).is_err());
    }
}
