import Foundation

/// Certificates for TLS tests, made by openssl in the test's directory.
public enum TestCertificates {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// A CA, a server certificate for 127.0.0.1 and a client certificate,
    /// made by openssl; and a second CA that signed none of them.
    public static func make(in directory: String) throws {
        let script = """
            set -e
            cd '\(directory)'
            openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca -keyout ca.key -out ca.crt 2>/dev/null
            openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=other-ca -keyout other.key -out other.crt 2>/dev/null
            openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout server.key -out server.csr 2>/dev/null
            openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -copy_extensions copy -out server.crt 2>/dev/null
            openssl req -newkey rsa:2048 -nodes -subj /CN=gateway -keyout client.key -out client.csr 2>/dev/null
            openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out client.crt 2>/dev/null
            chmod 0644 *.key
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw Failure(description: "openssl exited \(process.terminationStatus)") }
    }
}
