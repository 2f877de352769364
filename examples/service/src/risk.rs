//! The service's handler: a pre-trade risk check of one order, written once in Rust with
//! `#[gyre::handler]`, so it runs on the CPU backend and, as generated C, on a GPU.
//!
//! The checks are the stateless ones an exchange gateway runs on every order before it
//! reaches the book: quantity within the account's order limit, a positive price, a
//! price collar around the symbol's reference price (directional: a buy may not pay more
//! than the band above it, a sell may not sell below the band under it), and the order's
//! notional within the account's limit. The host enriches each order with the reference
//! price and the account's limits ([`RefData`]) before it is sent, so the kernel needs no
//! state of its own.
//!
//! Prices are fixed point: [`TICKS_PER_UNIT`] ticks per currency unit.

use serde::{Deserialize, Serialize};

/// Ticks per currency unit: prices travel as `i64` ticks of 1/10 000.
pub const TICKS_PER_UNIT: i64 = 10_000;
/// The largest quantity an order may carry (the HTTP layer refuses more with 400), so
/// that `qty * price` cannot overflow `i64`.
pub const MAX_QTY: i64 = 1_000_000_000;
/// The largest price, in ticks (100 000.0000), for the same reason.
pub const MAX_PRICE_TICKS: i64 = 100_000 * TICKS_PER_UNIT;

/// Why an order was rejected (`Decision::reason`); `0` is accepted.
pub mod reason {
    /// Accepted.
    pub const OK: u32 = 0;
    /// The quantity is zero or negative.
    pub const BAD_QTY: u32 = 1;
    /// The quantity is above the account's per-order limit.
    pub const QTY_LIMIT: u32 = 2;
    /// The price is zero or negative.
    pub const BAD_PRICE: u32 = 3;
    /// The symbol has no reference price.
    pub const NO_REFERENCE: u32 = 4;
    /// The price is outside the collar around the reference price.
    pub const PRICE_BAND: u32 = 5;
    /// The notional is above the account's per-order limit.
    pub const NOTIONAL_LIMIT: u32 = 6;

    /// A reason's name, as the JSON reply spells it.
    pub fn name(r: u32) -> &'static str {
        match r {
            OK => "ok",
            BAD_QTY => "bad_qty",
            QTY_LIMIT => "qty_limit",
            BAD_PRICE => "bad_price",
            NO_REFERENCE => "no_reference",
            PRICE_BAND => "price_band",
            NOTIONAL_LIMIT => "notional_limit",
            _ => "unknown",
        }
    }
}

/// One order as the kernel sees it: the client's order enriched with its reference price
/// and its account's limits (64 bytes: one slot payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq, gyre::Pod, gyre::Zeroable, gyre::DeviceType)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Order {
    /// The client's order id, echoed in the decision.
    pub id: u64,
    /// Quantity, > 0.
    pub qty: i64,
    /// Limit price, in ticks.
    pub price: i64,
    /// The symbol's reference price, in ticks (0: none).
    pub ref_price: i64,
    /// The account's per-order quantity limit.
    pub max_qty: i64,
    /// The account's per-order notional limit, in ticks (qty x price).
    pub max_notional: i64,
    /// The account.
    pub account: u32,
    /// 0 buy, 1 sell.
    pub side: u32,
    /// The collar's half-width, in basis points of the reference price.
    pub band_bps: u32,
    /// Zero.
    pub reserved: u32,
}

/// The kernel's answer to one [`Order`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, gyre::Pod, gyre::Zeroable, gyre::DeviceType)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct Decision {
    /// The order's id.
    pub id: u64,
    /// qty x price, in ticks.
    pub notional: i64,
    /// How far the price is past the reference, against the order (in basis points;
    /// negative: better than the reference).
    pub deviation_bps: i64,
    /// 1 accepted, 0 rejected.
    pub accepted: u32,
    /// A [`reason`] code.
    pub reason: u32,
}

/// The risk check. Total on every input: no division by zero, and the arithmetic wraps
/// (the HTTP layer bounds quantity and price so it never needs to).
#[gyre::handler]
pub fn risk_check(o: Order) -> Decision {
    let notional: i64 = o.qty * o.price;
    let mut deviation: i64 = 0;
    if o.ref_price > 0 {
        let mut against: i64 = o.price - o.ref_price;
        if o.side != 0 {
            against = o.ref_price - o.price;
        }
        deviation = against * 10000 / o.ref_price;
    }
    let mut why: u32 = 0;
    if o.qty <= 0 {
        why = 1;
    } else if o.qty > o.max_qty {
        why = 2;
    } else if o.price <= 0 {
        why = 3;
    } else if o.ref_price <= 0 {
        why = 4;
    } else if deviation > o.band_bps as i64 {
        why = 5;
    } else if notional > o.max_notional {
        why = 6;
    }
    let mut accepted: u32 = 0;
    if why == 0 {
        accepted = 1;
    }
    Decision {
        id: o.id,
        notional: notional,
        deviation_bps: deviation,
        accepted: accepted,
        reason: why,
    }
}

/// An order as a client sends it in JSON (`POST /v1/risk`).
///
/// `{"id": 1, "account": 7, "symbol": "SYM042", "side": "buy", "qty": 100, "price": 142.5}`
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OrderJson {
    /// The client's order id.
    pub id: u64,
    /// The account.
    pub account: u32,
    /// The symbol, one of [`RefData`]'s.
    pub symbol: String,
    /// `buy` or `sell`.
    pub side: Side,
    /// Quantity, 1 ..= [`MAX_QTY`].
    pub qty: i64,
    /// Limit price in currency units, > 0 and at most [`MAX_PRICE_TICKS`] ticks.
    pub price: f64,
}

/// An order's side.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Buy.
    Buy,
    /// Sell.
    Sell,
}

/// The compact binary form of an order (`Content-Type: application/octet-stream`): these
/// 32 bytes, little-endian, `#[repr(C)]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, gyre::Pod, gyre::Zeroable)]
#[bytemuck(crate = "gyre::bytemuck")]
#[repr(C)]
pub struct WireOrder {
    /// The client's order id.
    pub id: u64,
    /// Quantity.
    pub qty: i64,
    /// Limit price, in ticks.
    pub price: i64,
    /// The account.
    pub account: u32,
    /// The symbol's index in [`RefData`] (bits 0..31) and the side (bit 31: sell).
    pub symbol_side: u32,
}

/// A decision as JSON.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DecisionJson {
    /// The order's id.
    pub id: u64,
    /// Whether the order may go to the market.
    pub accepted: bool,
    /// Why not ([`reason::name`]), or `ok`.
    pub reason: String,
    /// qty x price, in currency units.
    pub notional: f64,
    /// How far the price is past the reference, against the order, in basis points.
    pub deviation_bps: i64,
}

impl From<Decision> for DecisionJson {
    fn from(d: Decision) -> Self {
        Self {
            id: d.id,
            accepted: d.accepted == 1,
            reason: reason::name(d.reason).to_owned(),
            notional: d.notional as f64 / TICKS_PER_UNIT as f64,
            deviation_bps: d.deviation_bps,
        }
    }
}

/// Why an order was refused before it reached the kernel: `400` for a body that is not
/// an order, `422` for an order of an unknown symbol or account.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BadOrder {
    /// Not JSON of the order's shape, or a binary body of the wrong length.
    #[error("malformed order: {0}")]
    Malformed(String),
    /// A field outside its range.
    #[error("{field} out of range: {value}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// Its value.
        value: String,
    },
    /// A symbol the reference data does not list.
    #[error("unknown symbol {0}")]
    UnknownSymbol(String),
    /// An account the reference data does not list.
    #[error("unknown account {0}")]
    UnknownAccount(u32),
}

/// The host's reference data: each symbol's reference price and each account's limits.
/// A real gateway loads these from its market-data and account services; here they are
/// generated: symbols `SYM000` .. and accounts `0 ..`.
#[derive(Clone, Debug)]
pub struct RefData {
    symbols: Vec<(String, i64)>,
    accounts: u32,
    limits: Limits,
}

/// One account's limits (every account gets the same here).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Per-order quantity limit.
    pub max_qty: i64,
    /// Per-order notional limit, in ticks.
    pub max_notional: i64,
    /// Price collar half-width, basis points.
    pub band_bps: u32,
}

impl Default for RefData {
    fn default() -> Self {
        Self::generated(100, 1000)
    }
}

impl RefData {
    /// `symbols` symbols `SYM000 ..` priced 100.00, 101.00, ... and `accounts` accounts
    /// with 10 000 lots, 1 000 000.00 notional and a 5% collar each.
    pub fn generated(symbols: usize, accounts: u32) -> Self {
        Self {
            symbols: (0..symbols)
                .map(|i| (format!("SYM{i:03}"), (100 + i as i64) * TICKS_PER_UNIT))
                .collect(),
            accounts,
            limits: Limits {
                max_qty: 10_000,
                max_notional: 1_000_000 * TICKS_PER_UNIT,
                band_bps: 500,
            },
        }
    }

    /// The symbols, with their reference prices in ticks.
    pub fn symbols(&self) -> &[(String, i64)] {
        &self.symbols
    }

    /// How many accounts there are (`0 .. accounts`).
    pub fn accounts(&self) -> u32 {
        self.accounts
    }

    /// The kernel's order for a JSON one.
    ///
    /// # Errors
    ///
    /// [`BadOrder`] when a field is out of range or the symbol or account is unknown.
    pub fn enrich_json(&self, o: &OrderJson) -> Result<Order, BadOrder> {
        let ticks = (o.price * TICKS_PER_UNIT as f64).round();
        // At least one tick: a price that rounds to 0 is no price.
        if !(ticks.is_finite() && ticks >= 1.0 && ticks <= MAX_PRICE_TICKS as f64) {
            return Err(BadOrder::OutOfRange {
                field: "price",
                value: o.price.to_string(),
            });
        }
        let symbol = self
            .symbols
            .iter()
            .position(|(s, _)| *s == o.symbol)
            .ok_or_else(|| BadOrder::UnknownSymbol(o.symbol.clone()))?;
        let side = u32::from(o.side == Side::Sell);
        self.enrich(o.id, o.qty, ticks as i64, o.account, symbol, side)
    }

    /// The kernel's order for a binary one.
    ///
    /// # Errors
    ///
    /// As [`RefData::enrich_json`].
    pub fn enrich_wire(&self, w: &WireOrder) -> Result<Order, BadOrder> {
        if w.price <= 0 || w.price > MAX_PRICE_TICKS {
            return Err(BadOrder::OutOfRange {
                field: "price",
                value: w.price.to_string(),
            });
        }
        let symbol = (w.symbol_side & 0x7fff_ffff) as usize;
        if symbol >= self.symbols.len() {
            return Err(BadOrder::UnknownSymbol(format!("#{symbol}")));
        }
        self.enrich(w.id, w.qty, w.price, w.account, symbol, w.symbol_side >> 31)
    }

    fn enrich(
        &self,
        id: u64,
        qty: i64,
        price: i64,
        account: u32,
        symbol: usize,
        side: u32,
    ) -> Result<Order, BadOrder> {
        if !(1..=MAX_QTY).contains(&qty) {
            return Err(BadOrder::OutOfRange {
                field: "qty",
                value: qty.to_string(),
            });
        }
        if account >= self.accounts {
            return Err(BadOrder::UnknownAccount(account));
        }
        Ok(Order {
            id,
            qty,
            price,
            ref_price: self.symbols[symbol].1,
            max_qty: self.limits.max_qty,
            max_notional: self.limits.max_notional,
            account,
            side,
            band_bps: self.limits.band_bps,
            reserved: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(qty: i64, price: f64, side: Side) -> Order {
        RefData::default()
            .enrich_json(&OrderJson {
                id: 9,
                account: 3,
                symbol: "SYM000".into(),
                side,
                qty,
                price,
            })
            .unwrap()
    }

    #[test]
    fn the_checks_decide_as_a_gateway_would() {
        let ok = risk_check(order(10, 101.0, Side::Buy));
        assert_eq!((ok.accepted, ok.reason, ok.id), (1, reason::OK, 9));
        assert_eq!(ok.notional, 10 * 101 * TICKS_PER_UNIT);
        assert_eq!(ok.deviation_bps, 100);
        // A buy 6% above the reference is outside the 5% collar; a sell there is not.
        assert_eq!(
            risk_check(order(10, 106.0, Side::Buy)).reason,
            reason::PRICE_BAND
        );
        assert_eq!(risk_check(order(10, 106.0, Side::Sell)).reason, reason::OK);
        assert_eq!(
            risk_check(order(10, 94.0, Side::Sell)).reason,
            reason::PRICE_BAND
        );
        assert_eq!(
            risk_check(order(10_001, 100.0, Side::Buy)).reason,
            reason::QTY_LIMIT
        );
        assert_eq!(
            risk_check(order(10_000, 104.0, Side::Buy)).reason,
            reason::NOTIONAL_LIMIT
        );
        let mut no_ref = order(1, 100.0, Side::Buy);
        no_ref.ref_price = 0;
        assert_eq!(risk_check(no_ref).reason, reason::NO_REFERENCE);
    }

    #[test]
    fn bad_orders_never_become_kernel_orders() {
        let r = RefData::default();
        let base = OrderJson {
            id: 1,
            account: 0,
            symbol: "SYM001".into(),
            side: Side::Buy,
            qty: 1,
            price: 101.0,
        };
        assert!(r.enrich_json(&base).is_ok());
        for (bad, what) in [
            (
                OrderJson {
                    qty: 0,
                    ..base.clone()
                },
                "qty",
            ),
            (
                OrderJson {
                    price: f64::NAN,
                    ..base.clone()
                },
                "price",
            ),
            (
                OrderJson {
                    price: -1.0,
                    ..base.clone()
                },
                "price",
            ),
            (
                OrderJson {
                    symbol: "NOPE".into(),
                    ..base.clone()
                },
                "symbol",
            ),
            (
                OrderJson {
                    account: 1000,
                    ..base.clone()
                },
                "account",
            ),
        ] {
            assert!(r.enrich_json(&bad).is_err(), "{what}");
        }
        let w = WireOrder {
            id: 1,
            qty: 5,
            price: 101 * TICKS_PER_UNIT,
            account: 2,
            symbol_side: 1 | (1 << 31),
        };
        let o = r.enrich_wire(&w).unwrap();
        assert_eq!((o.side, o.ref_price), (1, 101 * TICKS_PER_UNIT));
        assert!(r
            .enrich_wire(&WireOrder {
                symbol_side: 100,
                ..w
            })
            .is_err());
    }
}
