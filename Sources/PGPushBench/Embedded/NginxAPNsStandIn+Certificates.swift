import PGPushDevelopment
import PGPushSimulator

extension NginxAPNsStandIn {
    /// Starts the stand-in with a fresh CA and server certificate (the simulator's) written to `directory`, and
    /// returns it with the CA file a client must trust.
    static func start(certificateDirectory directory: String) throws -> (standIn: NginxAPNsStandIn, caFile: String) {
        let certificates = SimulatorCertificates(directory: directory)
        try certificates.ensureExist(force: true)
        let standIn = try start(certificatePath: certificates.serverCertificatePath, keyPath: certificates.serverKeyPath)
        return (standIn, certificates.caCertificatePath)
    }
}
