def mean(values):
    """Arithmetic mean of a non-empty list of numbers."""
    return sum(values) / len(values)


def variance(values):
    m = 
    return sum((v - m) ** 2 for v in values) / len(values)
