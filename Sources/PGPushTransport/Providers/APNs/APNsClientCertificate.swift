/// APNs certificate authentication's credential: the client certificate and key presented in the TLS
/// handshake (see ``ProviderCredentials/certificate(_:)``).
public typealias APNsClientCertificate = TLSClientCertificate
