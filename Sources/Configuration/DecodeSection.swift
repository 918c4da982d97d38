import PayloadLayout

/// `[decode]`: the dongle's payload, field by field, so that `tether
/// readings` and `tether forward` print named values (`fields`) beside the
/// record's `hex`. Optional: without it records carry hex alone.
///
/// ```toml
/// [decode]
/// fields = ["sequence:u32le", "temperature_c:i16le*0.01", "humidity_pct:u16le*0.01"]
/// characteristic = "6e400003-b5a3-f393-e0a9-e50e24dcca9e"   # optional: only this one's payloads
/// ```
extension TetherConfig {
    static func parseDecode(_ section: ConfigSection) throws(ConfigError) -> PayloadLayout? {
        try section.rejectUnknownKeys(ConfigKeys.decode)
        guard let texts = try section.stringArray("fields") else {
            if section.table != nil, try section.string("characteristic") != nil {
                throw section.error("fields", "missing: [decode] needs fields, such as [\"temperature:i16le*0.01\"]")
            }
            return nil
        }
        var fields: [PayloadLayout.Field] = []
        for (index, text) in texts.enumerated() {
            do throws(PayloadLayout.DeclarationError) {
                fields.append(try PayloadLayout.Field.parse(text))
            } catch {
                throw section.error("fields", "field \(index + 1), \(error)")
            }
        }
        let characteristic = try section.string("characteristic").map { text throws(ConfigError) in
            try section.normalizedUUID(text, key: "characteristic")
        }
        do throws(PayloadLayout.DeclarationError) {
            return try PayloadLayout(fields: fields, characteristic: characteristic)
        } catch {
            throw section.error("fields", "\(error)")
        }
    }
}
