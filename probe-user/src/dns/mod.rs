//! The authoritative DNS server of SPEC section 7: answers for `[dns].zone` from the change
//! stream, one name per profile, by the profile's routing method.
pub mod regions;
pub mod zone;
