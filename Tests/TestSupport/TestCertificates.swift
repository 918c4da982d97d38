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
        try run(script)
    }

    /// In `directory` (after `make`): `future.crt`, a server certificate
    /// for 127.0.0.1 signed by the same CA but valid only from tomorrow, as
    /// a gateway whose clock reads 1970 sees every certificate.
    public static func makeNotYetValid(in directory: String) throws {
        let script = """
            set -e
            cd '\(directory)'
            printf '%s\\n' '[ca]' 'default_ca = future' '[future]' 'database = index.txt' 'new_certs_dir = .' \\
              'certificate = ca.crt' 'private_key = ca.key' 'serial = future.serial' 'default_md = sha256' \\
              'policy = anything' 'copy_extensions = copy' '[anything]' 'commonName = supplied' > future.cnf
            : > index.txt
            echo 01 > future.serial
            openssl ca -batch -notext -config future.cnf -in server.csr -out future.crt \\
              -startdate "$(date -u -d tomorrow +%Y%m%d%H%M%SZ)" -enddate "$(date -u -d '+2 days' +%Y%m%d%H%M%SZ)" 2>/dev/null
            """
        try run(script)
    }

    private static func run(_ script: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", script]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw Failure(description: "openssl exited \(process.terminationStatus)") }
    }
}
