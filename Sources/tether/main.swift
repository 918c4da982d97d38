print("tether")
