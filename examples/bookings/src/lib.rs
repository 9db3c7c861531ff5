//! A seat booking service built on [`exactly_once`], through its public
//! API only: the library's second user after the shop (`server/`).
//!
//! `POST /bookings {"seat": "12A"}` with an `Idempotency-Key` books a seat
//! at most once per key, in two phases around a call to an outside
//! partner (the seat's operator):
//!
//! 1. [`HoldSeat`], in the transaction that claims the key: the booking is
//!    inserted as `held` in this service's own table, and the operation
//!    stops at the recovery point [`SEAT_HELD`] with a [`Held`] state. A
//!    seat already booked finishes here instead, with a recorded 409
//!    `seat-taken` (a business refusal, replayed like a success).
//! 2. The step ([`PartnerSteps`]): the partner confirms the seat, sent the
//!    run's downstream key as its `Idempotency-Key`, so every attempt and
//!    resumption of one run asks it once.
//! 3. [`ConfirmSeat`], in a transaction of its own under the lease: the
//!    booking becomes `confirmed` with the partner's code, and the answer,
//!    `201 {"id","seat","status","confirmation"}`, is recorded with the key.
//!
//! A crash anywhere resumes from the last recorded point: a retry of the
//! key, or the completer, sends the partner the same downstream key.
//!
//! - [`config`]: the flags; [`app`]: the store, the engine, the router, the
//!   background tasks; [`operation`]: the SQL of both phases on each
//!   backend; [`steps`]: the partner call; [`routes`]: the HTTP API;
//!   [`db`]: the service's own reads; [`operations`]: `bookings
//!   operations list|show|retry`, the engine's operator calls.

pub mod app;
pub mod config;
pub mod db;
pub mod operation;
pub mod operations;
pub mod routes;
pub mod steps;

pub use app::{App, StartupError};
pub use config::Config;
pub use operation::{ConfirmSeat, Held, HoldSeat, SEAT_HELD};
pub use steps::PartnerSteps;
