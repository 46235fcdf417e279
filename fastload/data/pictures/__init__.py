"""Generated pictures for tests, benches and the demo: an ImageFolder tree of synthetic
JPEGs and crops of public-domain photographs.
"""
