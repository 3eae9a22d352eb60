//! The port traits written once, as method lists, and the forwarding code
//! generated from those lists.
//!
//! [`Target`](super::Target) and [`Source`](super::Source) are each one list
//! of methods (`target.rs`, `source.rs`): the trait is emitted from it, and
//! so is every impl that only passes calls on, so adding a method to a port
//! is one edit of its list:
//!
//! - [`forward_target!`]`{ enum Kind { A, B } }` (and [`forward_source!`]):
//!   an enum whose variants each hold an implementation forwards every
//!   method to the variant it holds (the CLI's choice of adapter);
//! - [`forward_target!`]`{ impl[T: Target] Wrapper<T> => wrap(inner) }`:
//!   a wrapper forwards every method to its field `inner`, each async call
//!   through [`Intercept::intercept`] (a fault injected, an error redacted)
//!   and a direct publication's feed through [`Intercept::feed`]; calls
//!   without I/O (e.g. `scope`) pass straight through.
//!
//! Every call is static dispatch: no boxed future, nothing on the hot path
//! (`load`, `read`) but the wrapper's own hook.
//!
//! A list is a sequence of trait methods, each taking `&self`, `async` for
//! the methods that return a future (emitted as `fn ... -> impl Future +
//! Send`, a default body being the future's body). A parameter marked
//! `#[feed]` is a [`DirectFeed`](super::DirectFeed), handed to the inner
//! port through [`Intercept::feed`].

use super::{DirectFeed, Result};
use std::future::Future;

/// What a wrapper made by [`forward_target!`] or [`forward_source!`] does
/// around the calls it passes to the port it wraps.
pub trait Intercept: Send + Sync {
    /// Runs `call`, the wrapped port's method `method` (its name, e.g.
    /// `"load"`), and returns its result: e.g. injects a fault instead, or
    /// redacts the error.
    fn intercept<R: Send>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<R>> + Send,
    ) -> impl Future<Output = Result<R>> + Send;

    /// A direct publication's feed on its way to the wrapped target: that
    /// target's chunk errors reach the engine through it, not through the
    /// call's result. The default passes it unchanged.
    fn feed(&self, feed: DirectFeed) -> DirectFeed {
        feed
    }
}

/// The names the method lists use, for impls generated in other crates.
#[doc(hidden)]
pub mod prelude {
    pub use crate::Diagnostic;
    pub use crate::evidence::PublicationCheck;
    pub use crate::incremental::{CursorKind, CursorValue, StoredMark};
    pub use crate::ports::{
        AccessPath, ClaimAttempt, ClaimRequest, Contents, DirectFeed, EligibilityRequest, FrameRx, FrameTx, GenerationBuild,
        GenerationEstimate, MarkedPublication, MergeCounts, MergeKey, MergeShape, PartIdentity, PublicationOutcome, ReadRequest, ReadStats,
        ReconcileScope, Reconciliation, Result, RowFilter, SourceEstimate, SourceVersion, TableRole, TargetClaim, WindowStats,
    };
    pub use crate::rowbinary::DateTime64Range;
    pub use crate::time::Timestamp;
    pub use crate::types::{Column, ColumnType};
    pub use crate::window::Chunk;
}

/// Reads a method list one method at a time into a uniform form, then
/// calls `$cb!{ $ctx item... }`, each item
/// `{ async|sync name [attributes] [default body] (self, [marker] arg: type, ...) -> return type }`.
#[doc(hidden)]
#[macro_export]
macro_rules! __port_methods {
    ($cb:path, $ctx:tt, [$($done:tt)*]) => { $cb!{ $ctx $($done)* } };
    ($cb:path, $ctx:tt, [$($done:tt)*]
        $(#[$m:meta])* async fn $name:ident(&$self:ident $(, $(#[$pm:ident])? $arg:ident : $ty:ty)* $(,)?) -> $ret:ty ; $($rest:tt)*) => {
        $crate::__port_methods!{ $cb, $ctx, [$($done)* { async $name [$(#[$m])*] [] ($self $(, [$($pm)?] $arg : $ty)*) -> $ret }] $($rest)* }
    };
    ($cb:path, $ctx:tt, [$($done:tt)*]
        $(#[$m:meta])* async fn $name:ident(&$self:ident $(, $(#[$pm:ident])? $arg:ident : $ty:ty)* $(,)?) -> $ret:ty $body:block $($rest:tt)*) => {
        $crate::__port_methods!{ $cb, $ctx, [$($done)* { async $name [$(#[$m])*] [$body] ($self $(, [$($pm)?] $arg : $ty)*) -> $ret }] $($rest)* }
    };
    ($cb:path, $ctx:tt, [$($done:tt)*]
        $(#[$m:meta])* fn $name:ident(&$self:ident $(, $(#[$pm:ident])? $arg:ident : $ty:ty)* $(,)?) -> $ret:ty ; $($rest:tt)*) => {
        $crate::__port_methods!{ $cb, $ctx, [$($done)* { sync $name [$(#[$m])*] [] ($self $(, [$($pm)?] $arg : $ty)*) -> $ret }] $($rest)* }
    };
    ($cb:path, $ctx:tt, [$($done:tt)*]
        $(#[$m:meta])* fn $name:ident(&$self:ident $(, $(#[$pm:ident])? $arg:ident : $ty:ty)* $(,)?) -> $ret:ty $body:block $($rest:tt)*) => {
        $crate::__port_methods!{ $cb, $ctx, [$($done)* { sync $name [$(#[$m])*] [$body] ($self $(, [$($pm)?] $arg : $ty)*) -> $ret }] $($rest)* }
    };
}

/// One method of a list, as the trait declares it (`@trait`), as an enum
/// forwards it (`@enum`), or as a wrapper forwards it (`@wrap`).
#[doc(hidden)]
#[macro_export]
macro_rules! __port_method {
    (@trait { async $name:ident [$(#[$m:meta])*] [] ($self:ident $(, $pm:tt $arg:ident : $ty:ty)*) -> $ret:ty }) => {
        $(#[$m])* fn $name(&$self $(, $arg: $ty)*) -> impl ::std::future::Future<Output = $ret> + Send;
    };
    (@trait { async $name:ident [$(#[$m:meta])*] [$body:block] ($self:ident $(, $pm:tt $arg:ident : $ty:ty)*) -> $ret:ty }) => {
        $(#[$m])* fn $name(&$self $(, $arg: $ty)*) -> impl ::std::future::Future<Output = $ret> + Send { async move $body }
    };
    (@trait { sync $name:ident [$(#[$m:meta])*] [] ($self:ident $(, $pm:tt $arg:ident : $ty:ty)*) -> $ret:ty }) => {
        $(#[$m])* fn $name(&$self $(, $arg: $ty)*) -> $ret;
    };
    (@trait { sync $name:ident [$(#[$m:meta])*] [$body:block] ($self:ident $(, $pm:tt $arg:ident : $ty:ty)*) -> $ret:ty }) => {
        $(#[$m])* fn $name(&$self $(, $arg: $ty)*) -> $ret $body
    };

    (@enum $variants:tt { async $name:ident $attrs:tt $body:tt ($self:ident $(, $pm:tt $arg:ident : $ty:ty)*) -> $ret:ty }) => {
        async fn $name(&$self $(, $arg: $ty)*) -> $ret {
            $crate::__port_method!(@match $self $variants inner { inner.$name($($arg),*).await })
        }
    };
    (@enum $variants:tt { sync $name:ident $attrs:tt $body:tt ($self:ident $(, $pm:tt $arg:ident : $ty:ty)*) -> $ret:ty }) => {
        fn $name(&$self $(, $arg: $ty)*) -> $ret {
            $crate::__port_method!(@match $self $variants inner { inner.$name($($arg),*) })
        }
    };
    (@match $self:ident [$Enum:ident $($V:ident)*] $inner:ident $call:block) => {
        match $self { $( $Enum::$V($inner) => $call, )* }
    };

    (@wrap [$field:ident] { async $name:ident $attrs:tt $body:tt ($self:ident $(, $pm:tt $arg:ident : $ty:ty)*) -> $ret:ty }) => {
        async fn $name(&$self $(, $arg: $ty)*) -> $ret {
            let call = $self.$field.$name($($crate::__port_method!(@arg $self $pm $arg)),*);
            $crate::ports::Intercept::intercept($self, stringify!($name), call).await
        }
    };
    (@wrap [$field:ident] { sync $name:ident $attrs:tt $body:tt ($self:ident $(, $pm:tt $arg:ident : $ty:ty)*) -> $ret:ty }) => {
        fn $name(&$self $(, $arg: $ty)*) -> $ret {
            $self.$field.$name($($arg),*)
        }
    };
    (@arg $self:ident [feed] $arg:ident) => { $crate::ports::Intercept::feed($self, $arg) };
    (@arg $self:ident [] $arg:ident) => { $arg };
}

/// Emits the trait of a list: `[attributes vis trait Name: bounds] items`.
#[doc(hidden)]
#[macro_export]
macro_rules! __port_trait {
    ([$(#[$tm:meta])* $vis:vis trait $Trait:ident : $($bound:tt)*] $($item:tt)*) => {
        $(#[$tm])* $vis trait $Trait: $($bound)* { $( $crate::__port_method!{ @trait $item } )* }
    };
}

/// Emits a forwarding impl of a list: `[Trait mode context [generics] Type] items`.
#[doc(hidden)]
#[macro_export]
macro_rules! __port_impl {
    ([$Trait:ident $mode:ident $ctx:tt [$($gen:tt)*] $ty:ty] $($item:tt)*) => {
        const _: () = {
            use $crate::ports::forward::prelude::*;
            impl<$($gen)*> $crate::ports::$Trait for $ty { $( $crate::__port_method!{ @$mode $ctx $item } )* }
        };
    };
}

/// Implements [`Target`](crate::ports::Target) by forwarding every method:
///
/// - `forward_target! { enum Kind { A, B } }`: to the implementation the
///   enum's variant holds;
/// - `forward_target! { impl[T: Target] Wrapper<T> => wrap(inner) }`: to
///   the field `inner`, through the wrapper's [`Intercept`] impl.
#[macro_export]
macro_rules! forward_target {
    ($($how:tt)*) => { $crate::__forward_port!{ $crate::__target_methods, Target, $($how)* } };
}

/// Implements [`Source`](crate::ports::Source) by forwarding every method,
/// as [`forward_target!`] does for targets.
#[macro_export]
macro_rules! forward_source {
    ($($how:tt)*) => { $crate::__forward_port!{ $crate::__source_methods, Source, $($how)* } };
}

/// [`forward_target!`] and [`forward_source!`] of the port `$Trait` whose
/// method list is `$methods`.
#[doc(hidden)]
#[macro_export]
macro_rules! __forward_port {
    ($methods:path, $Trait:ident, enum $Enum:ident { $($V:ident),* $(,)? }) => {
        $methods!($crate::__port_impl, [$Trait enum [$Enum $($V)*] [] $Enum]);
    };
    ($methods:path, $Trait:ident, impl[$($gen:tt)*] $ty:ty => wrap($field:ident)) => {
        $methods!($crate::__port_impl, [$Trait wrap [$field] [$($gen)*] $ty]);
    };
}
