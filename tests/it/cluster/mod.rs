//! Several daemons sharing verdicts over authenticated gossip, and the cluster under churn and
//! attack.
mod chaos;
mod sharing;
