//! SASL/PLAIN on the Fluss port, as the Fluss clients speak it.
//!
//! A client first negotiates versions (ApiVersions), then sends Authenticate with protocol
//! `PLAIN` and the RFC 4616 token `[authzid] NUL username NUL password`. Until that succeeds the
//! connection may send only ApiVersions and Authenticate; anything else is answered with
//! AUTHENTICATE_EXCEPTION, the code the clients map to their authentication error. Without SASL
//! configured the listener is a Fluss PLAINTEXT one: an Authenticate request naming protocol
//! `PLAINTEXT` succeeds with an empty response, and one naming any other protocol (a client
//! configured for SASL) is answered AUTHENTICATE_EXCEPTION with Fluss's wording, so that client
//! fails to connect instead of believing it authenticated. The connection stays open, as on
//! Fluss.
//!
//! Passwords are compared without an early exit, never logged and redacted from `Debug`.

use crate::protocol::messages::{AuthenticateRequest, AuthenticateResponse};
use crate::protocol::{self, ApiError, code};
use bytes::Bytes;

/// The one mechanism silt serves.
pub const MECHANISM_PLAIN: &str = "PLAIN";

/// What a listener without SASL answers to: Fluss's name for it.
const PROTOCOL_PLAINTEXT: &str = "PLAINTEXT";

/// Longest PLAIN token accepted (authzid, username and password with separators).
const TOKEN_BYTES_MAX: usize = 4096;

/// Users allowed on the Fluss port when SASL/PLAIN is on.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SaslConfig {
    pub users: Vec<SaslUser>,
}

/// One SASL/PLAIN user.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslUser {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslUser")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl std::fmt::Debug for SaslConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslConfig")
            .field("users", &self.users)
            .finish()
    }
}

impl SaslConfig {
    /// Checks the user list is usable: at least one user, no empty names or passwords, no
    /// duplicate names.
    pub fn validate(&self) -> Result<(), String> {
        if self.users.is_empty() {
            return Err(
                "SASL is enabled but no users are configured; add at least one username and password"
                    .into(),
            );
        }
        for (i, user) in self.users.iter().enumerate() {
            if user.username.is_empty() || user.password.is_empty() {
                return Err(format!(
                    "SASL user {i} has an empty username or password; set both"
                ));
            }
            if user.username.contains('\0') || user.password.contains('\0') {
                return Err(format!(
                    "SASL user {:?} contains a NUL character, which PLAIN cannot carry",
                    user.username
                ));
            }
            if self.users[..i].iter().any(|u| u.username == user.username) {
                return Err(format!(
                    "SASL user {:?} is configured twice; keep one entry per username",
                    user.username
                ));
            }
        }
        Ok(())
    }

    /// Checks one PLAIN token and returns the authenticated username.
    fn check_plain(&self, token: &[u8]) -> Result<String, ApiError> {
        let failed = |reason: &str| {
            ApiError::new(
                code::AUTHENTICATE_EXCEPTION,
                format!("authentication failed: {reason}"),
            )
        };
        if token.len() > TOKEN_BYTES_MAX {
            return Err(failed("the PLAIN token is too long"));
        }
        let mut parts = token.split(|b| *b == 0);
        let (Some(authzid), Some(username), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(failed(
                "malformed PLAIN token (expected [authzid] NUL username NUL password)",
            ));
        };
        if !authzid.is_empty() && authzid != username {
            return Err(failed(
                "the authorization id differs from the username, which silt does not allow",
            ));
        }
        // Every configured user is compared, so the time taken does not reveal which names exist.
        let mut matched: Option<&SaslUser> = None;
        for user in &self.users {
            let name_ok = constant_time_eq(user.username.as_bytes(), username);
            let password_ok = constant_time_eq(user.password.as_bytes(), password);
            if name_ok & password_ok {
                matched = Some(user);
            }
        }
        match matched {
            Some(user) => Ok(user.username.clone()),
            None => Err(failed("invalid username or password")),
        }
    }
}

/// What a connection's authentication state machine decided about one frame.
pub enum Decision {
    /// Not an authentication matter: run the request normally.
    Pass,
    /// Answer with this frame and keep the connection.
    Answer(Bytes),
    /// Answer with this frame, then close the connection.
    AnswerAndClose(Bytes),
}

/// Per-connection authentication state.
pub struct ConnectionAuth<'a> {
    sasl: Option<&'a SaslConfig>,
    /// The authenticated username, or `Some("")` on a connection without SASL.
    principal: Option<String>,
}

impl<'a> ConnectionAuth<'a> {
    pub fn new(sasl: Option<&'a SaslConfig>) -> Self {
        ConnectionAuth {
            sasl,
            principal: if sasl.is_none() {
                Some(String::new())
            } else {
                None
            },
        }
    }

    pub fn is_authenticated(&self) -> bool {
        self.principal.is_some()
    }

    /// Decides what to do with a request before it is dispatched.
    pub fn decide(&mut self, api_key: i16, request_id: i32, body: Bytes) -> Decision {
        if api_key == protocol::api::AUTHENTICATE {
            return self.authenticate(request_id, body);
        }
        if self.is_authenticated() || api_key == protocol::api::API_VERSIONS {
            return Decision::Pass;
        }
        Decision::Answer(protocol::encode_error(
            request_id,
            &ApiError::new(
                code::AUTHENTICATE_EXCEPTION,
                format!(
                    "the connection has not authenticated (api key {api_key}): silt's hotstore requires SASL/PLAIN; \
                     set the client's security protocol to sasl with a username and password"
                ),
            ),
        ))
    }

    fn authenticate(&mut self, request_id: i32, body: Bytes) -> Decision {
        let request: AuthenticateRequest = match protocol::decode(body, "Authenticate") {
            Ok(request) => request,
            Err(error) => {
                return Decision::AnswerAndClose(protocol::encode_error(request_id, &error));
            }
        };
        let Some(sasl) = self.sasl else {
            if request.protocol.eq_ignore_ascii_case(PROTOCOL_PLAINTEXT) {
                return Decision::Answer(protocol::encode_success(
                    request_id,
                    &AuthenticateResponse { challenge: None },
                ));
            }
            return Decision::Answer(protocol::encode_error(
                request_id,
                &ApiError::new(
                    code::AUTHENTICATE_EXCEPTION,
                    format!(
                        "Authenticate protocol not match: protocol of server is '{PROTOCOL_PLAINTEXT}' while protocol of client is '{}'",
                        request.protocol
                    ),
                ),
            ));
        };
        if self.is_authenticated() {
            return Decision::Answer(protocol::encode_success(
                request_id,
                &AuthenticateResponse { challenge: None },
            ));
        }
        if !request.protocol.eq_ignore_ascii_case(MECHANISM_PLAIN) {
            return Decision::AnswerAndClose(protocol::encode_error(
                request_id,
                &ApiError::new(
                    code::AUTHENTICATE_EXCEPTION,
                    format!(
                        "authentication protocol {:?} is not supported; silt's hotstore speaks {MECHANISM_PLAIN}",
                        request.protocol
                    ),
                ),
            ));
        }
        match sasl.check_plain(&request.token) {
            Ok(username) => {
                tracing::debug!(%username, "sasl: authenticated");
                self.principal = Some(username);
                Decision::Answer(protocol::encode_success(
                    request_id,
                    &AuthenticateResponse { challenge: None },
                ))
            }
            // A failed attempt ends the connection: a client retries on a new one, and a
            // password guesser pays a connection per guess.
            Err(error) => Decision::AnswerAndClose(protocol::encode_error(request_id, &error)),
        }
    }
}

/// Compares without returning early on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Buf;
    use prost::Message;

    fn sasl() -> SaslConfig {
        SaslConfig {
            users: vec![
                SaslUser {
                    username: "alice".into(),
                    password: "wonder".into(),
                },
                SaslUser {
                    username: "bob".into(),
                    password: "builder".into(),
                },
            ],
        }
    }

    fn token(authzid: &str, user: &str, password: &str) -> Vec<u8> {
        [authzid.as_bytes(), user.as_bytes(), password.as_bytes()].join(&0u8)
    }

    /// The outcome of one frame as a short string: pass, ok, close:<code> or err:<code>.
    fn outcome(decision: Decision) -> String {
        let describe = |mut frame: Bytes| {
            frame.advance(4);
            let kind = frame.get_u8();
            frame.advance(4);
            if kind == 0 {
                "ok".to_string()
            } else {
                let error = crate::protocol::messages::ErrorResponse::decode(frame).unwrap();
                format!("err:{}", error.error_code)
            }
        };
        match decision {
            Decision::Pass => "pass".into(),
            Decision::Answer(frame) => describe(frame),
            Decision::AnswerAndClose(frame) => format!("close:{}", describe(frame)),
        }
    }

    fn auth_body(protocol: &str, token: Vec<u8>) -> Bytes {
        Bytes::from(
            AuthenticateRequest {
                protocol: protocol.into(),
                token,
            }
            .encode_to_vec(),
        )
    }

    #[test]
    fn plain_tokens() {
        let sasl = sasl();
        let cases: &[(&str, Vec<u8>, &str)] = &[
            ("PLAIN", token("", "alice", "wonder"), "ok"),
            ("plain", token("bob", "bob", "builder"), "ok"),
            ("PLAIN", token("", "alice", "builder"), "close:err:46"),
            ("PLAIN", token("", "mallory", "wonder"), "close:err:46"),
            ("PLAIN", token("bob", "alice", "wonder"), "close:err:46"),
            ("PLAIN", b"alice\0wonder".to_vec(), "close:err:46"),
            ("PLAIN", token("", "alice", "wonder\0x"), "close:err:46"),
            ("PLAIN", vec![0; 10_000], "close:err:46"),
            (
                "SCRAM-SHA-256",
                token("", "alice", "wonder"),
                "close:err:46",
            ),
        ];
        for (protocol, token, expected) in cases {
            let mut auth = ConnectionAuth::new(Some(&sasl));
            let got = outcome(auth.decide(
                protocol::api::AUTHENTICATE,
                1,
                auth_body(protocol, token.clone()),
            ));
            assert_eq!(&got, expected, "{protocol} {token:?}");
            assert_eq!(auth.is_authenticated(), *expected == "ok");
        }
    }

    #[test]
    fn requests_before_authentication() {
        let sasl = sasl();
        let mut auth = ConnectionAuth::new(Some(&sasl));
        let metadata = protocol::api::METADATA;
        assert_eq!(outcome(auth.decide(metadata, 1, Bytes::new())), "err:46");
        assert_eq!(
            outcome(auth.decide(protocol::api::API_VERSIONS, 2, Bytes::new())),
            "pass"
        );
        assert_eq!(
            outcome(auth.decide(protocol::api::AUTHENTICATE, 3, Bytes::from_static(b"\xff"))),
            "close:err:3",
            "an undecodable Authenticate is a corrupt message"
        );
        let body = auth_body("PLAIN", token("", "bob", "builder"));
        assert_eq!(
            outcome(auth.decide(protocol::api::AUTHENTICATE, 4, body.clone())),
            "ok"
        );
        assert_eq!(outcome(auth.decide(metadata, 5, Bytes::new())), "pass");
        assert_eq!(
            outcome(auth.decide(protocol::api::AUTHENTICATE, 6, body.clone())),
            "ok"
        );

        // Without SASL everything passes, as on a Fluss PLAINTEXT listener, which refuses a
        // client that tries SASL (it must not believe it authenticated) and keeps the
        // connection; Authenticate for PLAINTEXT itself succeeds.
        let mut open = ConnectionAuth::new(None);
        assert_eq!(outcome(open.decide(metadata, 1, Bytes::new())), "pass");
        assert_eq!(
            outcome(open.decide(protocol::api::AUTHENTICATE, 2, body)),
            "err:46"
        );
        let plaintext = auth_body("PLAINTEXT", Vec::new());
        assert_eq!(
            outcome(open.decide(protocol::api::AUTHENTICATE, 3, plaintext)),
            "ok"
        );
        assert_eq!(outcome(open.decide(metadata, 4, Bytes::new())), "pass");
    }

    #[test]
    fn config_is_validated_and_redacted() {
        assert!(sasl().validate().is_ok());
        assert!(SaslConfig::default().validate().is_err());
        let mut twice = sasl();
        twice.users[1].username = "alice".into();
        assert!(twice.validate().unwrap_err().contains("twice"));
        let mut empty = sasl();
        empty.users[0].password.clear();
        assert!(empty.validate().is_err());
        let shown = format!("{:?}", sasl());
        assert!(
            !shown.contains("wonder") && shown.contains("alice"),
            "{shown}"
        );
    }
}
