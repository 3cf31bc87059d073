-- The worker sends to FCM: a chunk belongs to one platform (one provider), and the fleet shares an OAuth
-- access token per service account the way it shares APNs provider tokens.

ALTER TABLE push.chunks
    ADD COLUMN platform text NOT NULL DEFAULT 'ios' CONSTRAINT chunks_platform_valid CHECK (platform IN ('ios', 'android'));

-- FCM access tokens say when they expire; APNs provider tokens age out by the worker's policy (NULL here).
-- An FCM row is keyed by ('fcm:' || client_email, private_key_id).
ALTER TABLE push.provider_tokens ADD COLUMN expires_at timestamptz;
