//! What a piece of handler syntax is, for the translator: literals without a type,
//! initializers that need one, block-like expressions, patterns that bind nothing, and
//! the C helper of an operator.

use syn::{BinOp, Block, Expr, Lit, Pat, Stmt, Type, UnOp};

use crate::literal;

/// Where a block's value goes.
#[derive(Clone)]
pub(crate) enum Tail {
    /// Returned from the function.
    Return,
    /// Stored in a C lvalue of a C type.
    Into(String, String),
    /// Dropped (a statement).
    Discard,
}

/// The helper call of a binary operator.
pub(super) fn helper_call(op: &str, l: &str, r: &str) -> String {
    match op {
        "div" | "rem" => format!("gyre_{op}({l}, {r}, gyre_p)"),
        _ => format!("gyre_{op}({l}, {r})"),
    }
}

/// The helper of a compound assignment operator.
pub(super) fn compound(op: &BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::AddAssign(_) => "add",
        BinOp::SubAssign(_) => "sub",
        BinOp::MulAssign(_) => "mul",
        BinOp::DivAssign(_) => "div",
        BinOp::RemAssign(_) => "rem",
        BinOp::BitAndAssign(_) => "and",
        BinOp::BitOrAssign(_) => "or",
        BinOp::BitXorAssign(_) => "xor",
        BinOp::ShlAssign(_) => "shl",
        BinOp::ShrAssign(_) => "shr",
        _ => return None,
    })
}

/// `(x)` -> `x`.
pub(super) fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => unparen(&p.expr),
        Expr::Group(g) => unparen(&g.expr),
        e => e,
    }
}

/// The C name of a struct field: prefixed, so that no Rust name (`long`, `int`,
/// `r#type`) is a C keyword. `#[derive(DeviceType)]` declares fields the same way.
pub(crate) fn c_field(rust: &str) -> String {
    format!("f_{}", rust.trim_start_matches("r#"))
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum LitKind {
    Int,
    Float,
}

/// The kind of an unsuffixed literal `e` (through `-` and parentheses), if it is one.
pub(super) fn literal_kind(e: &Expr) -> Option<LitKind> {
    match unparen(e) {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) if i.suffix().is_empty() => Some(LitKind::Int),
            Lit::Float(f) if f.suffix().is_empty() => Some(LitKind::Float),
            _ => None,
        },
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => literal_kind(&u.expr),
        _ => None,
    }
}

/// Whether `e` is a literal whose type comes from its context (no suffix).
pub(super) fn untyped(e: &Expr) -> bool {
    match e {
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) => i.suffix().is_empty(),
            Lit::Float(f) => f.suffix().is_empty(),
            _ => false,
        },
        Expr::Unary(u) => matches!(u.op, UnOp::Neg(_) | UnOp::Not(_)) && untyped(&u.expr),
        Expr::Paren(p) => untyped(&p.expr),
        Expr::Group(g) => untyped(&g.expr),
        Expr::Binary(b) => untyped(&b.left) && untyped(&b.right),
        _ => false,
    }
}

/// Whether a `let` without a type cannot take its initializer's type in C.
pub(super) fn needs_type(e: &Expr) -> bool {
    untyped(e)
        || matches!(
            e,
            Expr::Array(_) | Expr::Repeat(_) | Expr::Match(_) | Expr::Block(_)
        )
        || matches!(e, Expr::If(i) if single_expr(&i.then_branch).is_none())
}

/// An arm of the `match` `e` (a `let` initializer without a type) that names the
/// match's type: its value is a plain expression with a type of its own (not an
/// unsuffixed literal, not a block or another `match`), and its pattern binds nothing, so
/// the expression means the same outside the arm. Rust gives every arm one type.
pub(super) fn typing_arm(e: &Expr) -> Option<&Expr> {
    let Expr::Match(m) = unparen(e) else {
        return None;
    };
    m.arms.iter().find_map(|a| {
        let body = match unparen(&a.body) {
            Expr::Block(b) if b.label.is_none() => single_expr(&b.block)?,
            b => b,
        };
        let plain = !needs_type(body)
            && !is_block_like(body)
            && !matches!(
                body,
                Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) | Expr::Struct(_)
            );
        (plain && binds_nothing(&a.pat)).then_some(body)
    })
}

/// Whether a pattern binds no name (literals, ranges, `_`, paths, or-patterns of them).
pub(super) fn binds_nothing(p: &Pat) -> bool {
    match p {
        Pat::Lit(_) | Pat::Range(_) | Pat::Wild(_) | Pat::Path(_) => true,
        Pat::Or(o) => o.cases.iter().all(binds_nothing),
        Pat::Paren(q) => binds_nothing(&q.pat),
        _ => false,
    }
}

/// Statement-like expressions that may end a statement without `;`.
pub(super) fn is_block_like(e: &Expr) -> bool {
    matches!(
        e,
        Expr::If(_)
            | Expr::Match(_)
            | Expr::While(_)
            | Expr::Loop(_)
            | Expr::ForLoop(_)
            | Expr::Block(_)
    )
}

/// The only expression of a block with no statements.
pub(super) fn single_expr(b: &Block) -> Option<&Expr> {
    match b.stmts.as_slice() {
        [Stmt::Expr(e, None)] => Some(e),
        _ => None,
    }
}

/// The name of a scalar type written as a single identifier.
pub(super) fn scalar_name(t: &Type) -> Option<String> {
    match t {
        Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            let n = p.path.segments[0].ident.to_string();
            literal::scalar_c(&n).map(|_| n)
        }
        Type::Paren(p) => scalar_name(&p.elem),
        Type::Group(g) => scalar_name(&g.elem),
        _ => None,
    }
}

/// Whether a literal's (or constant's) suffix names an integer type.
#[allow(dead_code)]
pub(crate) fn is_int_type(name: &str) -> bool {
    literal::is_int(name)
}
