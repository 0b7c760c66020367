print("not yet built: see the issues")
