//! `entry!`: one exported `diopi*` function whose body runs under
//! [`rt::guard`](crate::rt::guard) with the context's queue in hand.

/// `entry! { fn diopiName[ctx, q](args..) { body } ... }`: the function
/// takes the context first, then `args`; `body` (an `R<()>`) sees the
/// context as `ctx` and its queue as `q`.
macro_rules! entry {
    ($(fn $f:ident[$ctx:ident, $q:ident]($($a:ident: $t:ty),* $(,)?) $body:block)*) => {$(
        #[no_mangle]
        unsafe extern "C" fn $f($ctx: crate::types::ContextHandle, $($a: $t),*) -> i32 {
            crate::rt::guard(&stringify!($f)[5..], || {
                // SAFETY: the framework passes its own handles and pointers,
                // all read on this thread before the call returns.
                unsafe {
                    let $q = crate::rt::queue($ctx)?;
                    let _ = (&$q, &$ctx);
                    $body
                }
            })
        }
    )*};
}
pub(crate) use entry;
