-- The dashboard's "Resend to failed tokens" (--allow-actions): push.resend_failed of 0024, which applies the
-- login's app grants itself, audited by the dashboard in the same transaction (it may already insert audit rows).
GRANT EXECUTE ON FUNCTION push.resend_failed(bigint, text[]) TO pgpush_dashboard_actions;
